# A chunk of zero bytes.
pipeline "backup" {
  chunk_size = "0"

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
