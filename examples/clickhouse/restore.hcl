# Restore the newest backup of a ClickHouse table that backup.hcl made:
# pipe finds the run's manifest, downloads and checks the object, decrypts
# and decompresses it, and clickhouse-client inserts the Native blocks
# (the exec sink). The table must exist: Native holds rows, not the
# table's definition. See README.md.
#
#   export PIPE_VAR_clickhouse_password=…
#   pipe run examples/clickhouse/restore.hcl --var bucket=my-backups --var table=shop.events

variable "clickhouse_host" { default = "localhost" }
variable "clickhouse_port" { default = 9000 }
variable "clickhouse_user" { default = "default" }

variable "clickhouse_password" {
  description = "clickhouse-client reads it from CLICKHOUSE_PASSWORD, so it is never on a command line."
  sensitive   = true
}

variable "table" {
  description = "The table whose backup is restored, as database.table."
  default     = "db.t"
}

variable "restore_table" {
  description = "The table the rows go into; empty: the backed-up table itself."
  default     = ""
}

variable "bucket" {}
variable "prefix" { default = "clickhouse" }
variable "s3_endpoint" { default = "" }
variable "s3_path_style" { default = false }

variable "s3_access_key" {
  default   = ""
  sensitive = true
}

variable "s3_secret_key" {
  default   = ""
  sensitive = true
}

variable "identities" {
  description = "The age private key file (secret: keep it off the machines that only back up)."
  default     = "keys/backup.key"
}

pipeline "restore" {
  # The newest run's manifest under this prefix says what to restore.
  source "s3" {
    bucket            = var.bucket
    prefix            = "${var.prefix}/${var.table}/"
    endpoint          = var.s3_endpoint
    path_style        = var.s3_path_style
    access_key_id     = var.s3_access_key
    secret_access_key = var.s3_secret_key
  }

  decrypt {
    identities = [file(var.identities)]
  }

  decompress {}

  sink "exec" {
    command = [
      "clickhouse-client",
      "--host", var.clickhouse_host,
      "--port", var.clickhouse_port,
      "--user", var.clickhouse_user,
      "--query", "INSERT INTO ${var.restore_table != "" ? var.restore_table : var.table} FORMAT Native",
    ]
    env = { CLICKHOUSE_PASSWORD = var.clickhouse_password }
  }
}
