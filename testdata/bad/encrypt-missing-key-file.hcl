# The recipient file does not exist.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {}

  encrypt {
    recipients = [file("missing.pub")]
  }

  sink "fs" {
    path = "backups/"
  }
}
