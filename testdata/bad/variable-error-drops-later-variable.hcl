# run: true
# expect: errors=1
# var.data is not set, and the source uses it; that error must not drop
# var.dest, whose valid reference draws no error.
variable "data" {}

variable "dest" {
  default = "backups/"
}

pipeline "backup" {
  source "fs" {
    path = var.data
  }

  sink "fs" {
    path = var.dest
  }
}
