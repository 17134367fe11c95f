# stream.name is known only in a sink's path.
pipeline "backup" {
  source "fs" {
    path = "examples/${stream.name}"
  }

  sink "fs" {
    path = "backups/"
  }
}
