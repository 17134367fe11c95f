# keep_last deletes older runs: each run needs its own folder.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }
  sink "fs" {
    path      = "backups/"
    keep_last = 7
  }
}
