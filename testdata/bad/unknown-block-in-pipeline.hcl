# There is no filter stage.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  filter {
    exclude = ["*.tmp"]
  }

  sink "fs" {
    path = "backups/"
  }
}
