# "age1notakey" is not an age public key.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {}

  encrypt {
    recipients = ["age1notakey"]
  }

  sink "fs" {
    path = "backups/"
  }
}
