# expect: errors=4
# Four wrong attributes in two blocks: every one is reported, not only the
# first of each block.
pipeline "dump" {
  chunk_size = "eight"
  streams    = "two"

  source "exec" {
    command = 42
    dir     = ["/var/backups"]
  }

  sink "fs" {
    path = "backups/"
  }
}
