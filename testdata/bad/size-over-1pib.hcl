# Sizes stop at 1 PiB.
pipeline "backup" {
  chunk_size = "2PiB"

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
