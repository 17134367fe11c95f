# A source reads one path.
pipeline "backup" {
  source "fs" {
    path = ["examples/data", "examples/more"]
  }

  sink "fs" {
    path = "backups/"
  }
}
