# Two compress stages.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    codec = "zstd"
  }

  compress {
    codec = "gzip"
  }

  sink "fs" {
    path = "backups/"
  }
}
