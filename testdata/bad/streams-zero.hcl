# No stream would ever move.
pipeline "backup" {
  streams = 0

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
