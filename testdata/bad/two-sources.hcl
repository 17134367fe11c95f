# A pipeline reads one source.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  source "fs" {
    path = "examples/more"
  }

  sink "fs" {
    path = "backups/"
  }
}
