# zstd levels stop below 23.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    codec = "zstd"
    level = 23
  }

  sink "fs" {
    path = "backups/"
  }
}
