# A size is a number and a unit.
pipeline "backup" {
  chunk_size = "eight"

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
