# "compres" for "compress".
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compres {
    codec = "zstd"
  }

  sink "fs" {
    path = "backups/"
  }
}
