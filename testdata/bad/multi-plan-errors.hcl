# expect: errors=8
# The file loads, but its settings are wrong in eight places, across two
# pipelines; plan reports them all at once.
pipeline "backup" {
  profile = "fastest"
  streams = 0

  source "fs" {
    path = "examples/data"
  }

  checksum {}

  compress {
    codec   = "zstd"
    level   = 30
    workers = 0
  }

  sink "fs" {
    path = "backups/"
  }
}

pipeline "restore" {
  buffers = 0

  source "fs" {
    path = "backups/backup/"
  }

  decompress {
    codec = "rar"
  }

  decrypt {}

  sink "fs" {
    path = "out/restored/"
  }
}
