# env: PIPE_PASSPHRASE=correct-horse-battery-staple
# decrypt reads a stored backup; it cannot follow encrypt.
pipeline "roundtrip" {
  source "fs" {
    path = "examples/data"
  }

  encrypt {
    passphrase = env("PIPE_PASSPHRASE")
  }

  decrypt {
    passphrase = env("PIPE_PASSPHRASE")
  }

  sink "fs" {
    path = "out/roundtrip/"
  }
}
