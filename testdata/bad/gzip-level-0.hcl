# gzip level 0 stores without compressing.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    codec = "gzip"
    level = 0
  }

  sink "fs" {
    path = "backups/"
  }
}
