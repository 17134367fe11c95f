# "output" is not a top-level block of a pipeline file.
output "where" {
  value = "backups/"
}

pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
