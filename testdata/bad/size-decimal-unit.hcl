# expect: warnings
# "8MB" is 8,000,000 bytes: valid, but probably meant as 8MiB.
pipeline "backup" {
  chunk_size = "8MB"

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
