# var.data has no default and no --var.
variable "data" {
  description = "The folder to back up."
}

pipeline "backup" {
  source "fs" {
    path = var.data
  }

  sink "fs" {
    path = "backups/"
  }
}
