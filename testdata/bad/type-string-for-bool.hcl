# tar is true or false, not "yes".
pipeline "backup" {
  source "fs" {
    path = "examples/data"
    tar  = "yes"
  }

  sink "fs" {
    path = "backups/"
  }
}
