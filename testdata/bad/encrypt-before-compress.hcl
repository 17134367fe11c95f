# expect: warnings
# Encrypted data does not compress: compress belongs before encrypt.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  encrypt {
    recipients = ["age13xtdgue4nx8hdzd3k70vqe2hkzjsztyjjzp99ay57plj4z2z25qsln7han"]
  }

  compress {
    codec = "zstd"
  }

  sink "fs" {
    path = "backups/"
  }
}
