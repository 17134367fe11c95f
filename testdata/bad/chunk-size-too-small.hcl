# Chunks of 1 KiB are below the 4 KiB minimum.
pipeline "backup" {
  chunk_size = "1KiB"

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
