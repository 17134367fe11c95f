# A decompress codec misspelled.
pipeline "restore" {
  source "fs" {
    path = "backups/backup/"
  }

  decompress {
    codec = "zstandard"
  }

  sink "fs" {
    path = "out/restored/"
  }
}
