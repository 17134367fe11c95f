# "fss" for "fs".
pipeline "backup" {
  source "fss" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}
