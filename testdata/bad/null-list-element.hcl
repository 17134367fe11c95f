# A command argument is null.
pipeline "dump" {
  source "exec" {
    command = ["pg_dump", null]
  }

  sink "fs" {
    path = "backups/"
  }
}
