# Back up a Redis server with the example plugin examples/plugins/redis:
#
#   go build -o .pipe/plugins/pipe-plugin-redis ./examples/plugins/redis
#   PIPE_VAR_redis_password=… pipe run examples/redis-backup.hcl --pipeline backup
#
# The restore pipeline writes the snapshot back as a plain dump.rdb, ready to
# be placed in a Redis server's data folder.

variable "redis_addr" { default = "127.0.0.1:6379" }

variable "redis_password" {
  default   = ""
  sensitive = true
}

variable "backups" { default = "backups/redis" }

pipeline "backup" {
  source "redis" {
    addr     = var.redis_addr
    password = var.redis_password
  }

  compress {}

  checksum {}

  sink "fs" {
    path = "${var.backups}/${run.id}/"
  }
}

pipeline "restore" {
  source "fs" {
    path = "${var.backups}/"
  }

  decompress {}

  sink "fs" {
    path = "${var.backups}-restored/"
  }
}
