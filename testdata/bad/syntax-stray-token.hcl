# A stray token after an attribute.
pipeline "backup" {
  source "fs" {
    path = "examples/data" ;
  }

  sink "fs" {
    path = "backups/"
  }
}
