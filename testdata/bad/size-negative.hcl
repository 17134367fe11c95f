# A negative size.
pipeline "backup" {
  chunk_size = "-1MiB"

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
