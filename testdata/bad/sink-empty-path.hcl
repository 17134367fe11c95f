# A sink must say where objects go.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "fs" {
    path = ""
  }
}
