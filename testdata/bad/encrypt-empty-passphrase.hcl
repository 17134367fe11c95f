# env: PIPE_PASSPHRASE=
# The passphrase's environment variable is set, but empty.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {}

  encrypt {
    passphrase = env("PIPE_PASSPHRASE")
  }

  sink "fs" {
    path = "backups/"
  }
}
