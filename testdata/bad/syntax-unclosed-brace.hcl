# The source block is never closed.
pipeline "backup" {
  source "fs" {
    path = "examples/data"

  sink "fs" {
    path = "backups/"
  }
}
