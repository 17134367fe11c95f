# "pth" for the fs source's "path".
pipeline "backup" {
  source "fs" {
    pth = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
