# compress, then decompress, in one pipeline: a decode cannot follow an encode.
pipeline "recompress" {
  source "fs" {
    path = "backups/backup/"
  }

  compress {
    codec = "gzip"
  }

  decompress {}

  sink "fs" {
    path = "backups/gzip/"
  }
}
