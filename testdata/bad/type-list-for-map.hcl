# env is a map of variables, not a list.
pipeline "dump" {
  source "exec" {
    command = ["pg_dump", "mydb"]
    env     = ["PGPASSWORD=secret"]
  }

  sink "fs" {
    path = "backups/"
  }
}
