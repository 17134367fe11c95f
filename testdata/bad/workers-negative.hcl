# A negative number of workers.
pipeline "restore" {
  source "fs" {
    path = "backups/backup/"
  }

  decompress {
    workers = -2
  }

  sink "fs" {
    path = "out/restored/"
  }
}
