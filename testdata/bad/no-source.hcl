# Nothing to read.
pipeline "backup" {
  compress {}

  sink "fs" {
    path = "backups/"
  }
}
