# checksum digests the stored bytes, so it comes last.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  checksum {}

  compress {
    codec = "zstd"
  }

  sink "fs" {
    path = "backups/"
  }
}
