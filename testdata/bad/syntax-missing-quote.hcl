# The source path lacks its closing quote.
pipeline "backup" {
  source "fs" {
    path = "examples/data
  }

  sink "fs" {
    path = "backups/"
  }
}
