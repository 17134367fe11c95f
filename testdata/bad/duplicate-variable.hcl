# A variable declared twice.
variable "data" {
  default = "examples/data"
}

variable "data" {
  default = "examples/other"
}

pipeline "backup" {
  source "fs" {
    path = var.data
  }

  sink "fs" {
    path = "backups/"
  }
}
