# There is no function "getenv"; env() reads the environment.
pipeline "backup" {
  source "fs" {
    path = getenv("BACKUP_ROOT")
  }

  sink "fs" {
    path = "backups/"
  }
}
