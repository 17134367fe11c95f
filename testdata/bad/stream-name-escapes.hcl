# A stream's name decides where a sink writes: it must stay inside the
# sink's folder.
# expect: errors=2
pipeline "esc" {
  source "exec" {
    command = ["true"]
    name    = "../../ESC"
  }
  sink "fs" {
    path = "out/"
  }
}

pipeline "abs" {
  source "exec" {
    command = ["true"]
    name    = "/etc/cron.d/x"
  }
  sink "fs" {
    path = "out/"
  }
}
