# An exec source needs a command.
pipeline "dump" {
  source "exec" {
    name = "db.dump"
  }

  sink "fs" {
    path = "backups/"
  }
}
