pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }
  sink "fs" {
    path        = "backups/${run.id}/"
    keep_within = "a month"
    keep_last   = 0
  }
}
