# A default cannot use another variable.
variable "root" {
  default = "backups"
}

variable "dest" {
  default = "${var.root}/nightly/"
}

pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = var.dest
  }
}
