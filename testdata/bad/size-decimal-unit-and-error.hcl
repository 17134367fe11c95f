# expect: errors=1
# The "8MB" warning comes with a real error (an unknown codec).
pipeline "backup" {
  chunk_size = "8MB"

  source "fs" {
    path = "examples/data"
  }

  compress {
    codec = "zip"
  }

  sink "fs" {
    path = "backups/"
  }
}
