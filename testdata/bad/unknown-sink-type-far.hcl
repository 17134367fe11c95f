# An endpoint type that is nothing like a built-in one.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "dropbox" {
    bucket = "backups"
  }
}
