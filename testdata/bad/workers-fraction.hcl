# Workers come whole.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    workers = 1.5
  }

  sink "fs" {
    path = "backups/"
  }
}
