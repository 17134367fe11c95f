# expect: errors=2
pipeline "backup" {
  rate_limit = "200MiB"
  source "fs" { path = "data/" }
  compress {}
  sink "fs" {
    path       = "backups/"
    rate_limit = "fast"
  }
}
