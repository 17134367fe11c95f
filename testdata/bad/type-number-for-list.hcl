# command is a list: the program and its arguments.
pipeline "dump" {
  source "exec" {
    command = 42
  }

  sink "fs" {
    path = "backups/"
  }
}
