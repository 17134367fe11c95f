# expect: errors=3
# A mistake in one attribute of a block hides none of the others: a
# wrong type, an out-of-range level, and a chunk size out of range.
pipeline "backup" {
  source "fs" {
    path = "examples/data"
  }

  compress {
    workers    = "two"
    level      = 99
    chunk_size = "1KiB"
  }

  sink "fs" {
    path = "backups/"
  }
}
