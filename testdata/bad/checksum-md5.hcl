# The checksum stage computes sha256 only.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  checksum {
    algorithm = "md5"
  }

  sink "fs" {
    path = "backups/"
  }
}
