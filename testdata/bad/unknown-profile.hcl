# "fast" is not a profile.
pipeline "backup" {
  profile = "fast"

  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
