# run: true
# var.data has no default and no --var, and the pipeline uses it: a run
# stops at the use (validate and plan carry it as unknown).
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
