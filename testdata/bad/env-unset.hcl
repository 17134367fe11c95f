# run: true
# $BACKUP_ROOT is not set and env() has no default.
pipeline "backup" {
  source "fs" {
    path = env("BACKUP_ROOT")
  }

  sink "fs" {
    path = "backups/"
  }
}
