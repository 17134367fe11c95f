# Nowhere to write.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {}
}
