# vars: workers=many
# var.workers is a number; --var workers=many is not.
variable "workers" {
  type    = number
  default = 2
}

pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    workers = var.workers
  }

  sink "fs" {
    path = "backups/"
  }
}
