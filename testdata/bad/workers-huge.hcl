# A number too large for any setting.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    workers = 1e30
  }

  sink "fs" {
    path = "backups/"
  }
}
