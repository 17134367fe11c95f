# "exe" for "exec".
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  sink "exe" {
    command = ["sh", "-c", "cat > backup.out"]
  }
}
