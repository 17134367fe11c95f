# decrypt needs identities or a passphrase.
pipeline "restore" {
  source "fs" {
    path = "backups/backup/"
  }

  decrypt {}

  decompress {}

  sink "fs" {
    path = "out/restored/"
  }
}
