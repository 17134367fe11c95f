# "xz" is not a codec.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    codec = "xz"
  }

  sink "fs" {
    path = "backups/"
  }
}
