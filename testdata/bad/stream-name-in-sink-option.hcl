# stream.name is known in a sink's path, not in its other settings.
pipeline "restore" {
  source "fs" {
    path = "backups/backup/"
  }

  sink "fs" {
    path  = "out/${stream.name}"
    untar = stream.name == "data.tar"
  }
}
