# A stage needs a worker.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    workers = 0
  }

  sink "fs" {
    path = "backups/"
  }
}
