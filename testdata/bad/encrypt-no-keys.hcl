# encrypt needs recipients or a passphrase.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {}

  encrypt {}

  sink "fs" {
    path = "backups/"
  }
}
