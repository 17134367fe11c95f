# run: true
# vars: level=high extra=1
# expect: errors=4
# Every variable mistake at once: no value (where a pipeline uses it), a
# value of the wrong type, a default that refers to a variable, and a --var
# for no variable.
variable "data" {}

variable "level" {
  type    = number
  default = 3
}

variable "dest" {
  default = "${var.data}/backups/"
}

pipeline "backup" {
  source "fs" {
    path = var.data
  }

  compress {
    level = 3
  }

  sink "fs" {
    path = "backups/"
  }
}
