# Frames of 2 GiB are above the 1 GiB maximum.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    chunk_size = "2GiB"
  }

  sink "fs" {
    path = "backups/"
  }
}
