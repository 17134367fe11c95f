# env: PIPE_PASSPHRASE=correct-horse-battery-staple
# encrypt takes recipients or a passphrase, not both.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {}

  encrypt {
    recipients = ["age13xtdgue4nx8hdzd3k70vqe2hkzjsztyjjzp99ay57plj4z2z25qsln7han"]
    passphrase = env("PIPE_PASSPHRASE")
  }

  sink "fs" {
    path = "backups/"
  }
}
