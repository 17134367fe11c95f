# Pipeline names hold letters, digits, _ and -.
pipeline "nightly backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
