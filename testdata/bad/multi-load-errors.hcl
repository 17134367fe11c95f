# run: true
# expect: errors=7
# Six mistakes the loader finds, in several blocks and pipelines, all
# reported in one go (seven errors: "pth" is unknown, and path is missing).
pipeline "backup" {
  chunk_size = "eight"

  source "fs" {
    pth = "examples/data"
  }

  compres {
    codec = "zstd"
  }

  sink "fss" {
    path = "backups/"
  }
}

pipeline "restore" {
  source "fs" {
    path = env("BACKUP_ROOT")
  }

  decompress {
    workers = "two"
  }

  sink "fs" {
    path = "out/restored/"
  }
}
