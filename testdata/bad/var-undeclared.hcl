# vars: dest=backups/
# --var dest=… names no variable of this file.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
