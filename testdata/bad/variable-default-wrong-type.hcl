# The default does not fit the declared type.
variable "level" {
  type    = number
  default = "high"
}

pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    level = var.level
  }

  sink "fs" {
    path = "backups/"
  }
}
