# env: PIPE_IDENTITY=AGE-SECRET-KEY-1QQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQQ
# The identity in $PIPE_IDENTITY is malformed (a bad checksum); the message
# must not show it.
pipeline "restore" {
  source "fs" {
    path = "backups/backup/"
  }

  decrypt {
    identities = [env("PIPE_IDENTITY")]
  }

  decompress {}

  sink "fs" {
    path = "out/restored/"
  }
}
