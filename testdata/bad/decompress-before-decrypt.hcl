# env: PIPE_PASSPHRASE=correct-horse-battery-staple
# A restore decrypts first, then decompresses.
pipeline "restore" {
  source "fs" {
    path = "backups/backup/"
  }

  decompress {}

  decrypt {
    passphrase = env("PIPE_PASSPHRASE")
  }

  sink "fs" {
    path = "out/restored/"
  }
}
