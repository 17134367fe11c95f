# A variable name is an identifier.
variable "backup root" {
  default = "backups/"
}

pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
