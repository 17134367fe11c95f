# "text" is not a type; "string" is.
variable "data" {
  type    = text
  default = "examples/data"
}

pipeline "backup" {
  source "fs" {
    path = var.data
  }

  sink "fs" {
    path = "backups/"
  }
}
