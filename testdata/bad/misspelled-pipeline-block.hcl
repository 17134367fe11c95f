# "pipelines" for "pipeline".
pipelines "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
