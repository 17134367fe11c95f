# Back up one ClickHouse table, in ClickHouse's own Native format, through
# zstd and age encryption to an S3 bucket. clickhouse-client does the
# reading (the exec source); pipe compresses, encrypts, checksums and
# uploads what it prints. See README.md.
#
#   pipe keygen --if-missing                        # keys/backup.pub, keys/backup.key
#   export PIPE_VAR_clickhouse_password=…           # never in the file
#   pipe run examples/clickhouse/backup.hcl --var bucket=my-backups --var table=shop.events

variable "clickhouse_host" { default = "localhost" }
variable "clickhouse_port" { default = 9000 }
variable "clickhouse_user" { default = "default" }

variable "clickhouse_password" {
  description = "clickhouse-client reads it from CLICKHOUSE_PASSWORD, so it is never on a command line."
  sensitive   = true
}

variable "table" {
  description = "The table to back up, as database.table."
  default     = "db.t"
}

variable "bucket" {}
variable "prefix" { default = "clickhouse" }

variable "s3_endpoint" {
  description = "Empty for AWS; the store's URL for S3-compatible stores (MinIO, R2, …)."
  default     = ""
}

variable "s3_path_style" { default = false }

# Empty: the AWS SDK's chain (AWS_ACCESS_KEY_ID, ~/.aws, an instance role).
variable "s3_access_key" {
  default   = ""
  sensitive = true
}

variable "s3_secret_key" {
  default   = ""
  sensitive = true
}

variable "recipients" {
  description = "The age public key file the backup is encrypted to."
  default     = "keys/backup.pub"
}

pipeline "backup" {
  source "exec" {
    command = [
      "clickhouse-client",
      "--host", var.clickhouse_host,
      "--port", var.clickhouse_port,
      "--user", var.clickhouse_user,
      "--query", "SELECT * FROM ${var.table} FORMAT Native",
    ]
    env  = { CLICKHOUSE_PASSWORD = var.clickhouse_password }
    name = "${var.table}.native"
  }

  compress {
    codec = "zstd"
  }

  encrypt {
    recipients = [file(var.recipients)]
  }

  checksum {}

  # One folder per run; the manifest is written last, beside the object.
  sink "s3" {
    bucket            = var.bucket
    key               = "${var.prefix}/${var.table}/${run.id}/"
    endpoint          = var.s3_endpoint
    path_style        = var.s3_path_style
    access_key_id     = var.s3_access_key
    secret_access_key = var.s3_secret_key
  }
}
