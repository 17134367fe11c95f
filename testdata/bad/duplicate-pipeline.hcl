# Two pipelines named "backup".
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = "backups/"
  }
}

pipeline "backup" {
  source "fs" {
    path = "examples/other"
  }

  sink "fs" {
    path = "backups/other/"
  }
}
