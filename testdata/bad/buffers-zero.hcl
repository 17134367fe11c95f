# A run without buffers.
pipeline "backup" {
  buffers = 0

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
