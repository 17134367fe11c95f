# Back up a PostgreSQL database through zstd and age to an S3 bucket.
# pg_dump does the reading (custom format, its own compression off); with
# jobs > 1 pipe dumps the tables in parallel on one exported snapshot
# instead. See the Databases section of the top-level README.md.
#
#   pipe keygen --if-missing                  # keys/backup.pub, keys/backup.key
#   export PIPE_VAR_pg_password=…             # never in the file, never on a command line
#   pipe run examples/postgres/backup.hcl --var bucket=my-backups --var database=shop

variable "pg_host" { default = "localhost" }
variable "pg_port" { default = 5432 }
variable "pg_user" { default = "postgres" }
variable "database" { default = "postgres" }

variable "pg_password" {
  description = "Given to pg_dump in PGPASSWORD: never on a command line, never printed."
  sensitive   = true
}

variable "jobs" {
  description = "1: one pg_dump stream (custom format). More: tables in parallel on one snapshot."
  default     = 1
}

variable "bucket" {}
variable "prefix" { default = "pg" }

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

pipeline "backup" {
  source "postgres" {
    host     = var.pg_host
    port     = var.pg_port
    user     = var.pg_user
    password = var.pg_password
    database = var.database
    jobs     = var.jobs
  }

  compress {
    codec = "zstd"
    level = 3
  }

  encrypt {
    recipients = [file("keys/backup.pub")]
  }

  checksum {}

  sink "s3" {
    bucket            = var.bucket
    key               = "${var.prefix}/${var.database}/${run.id}/"
    endpoint          = var.s3_endpoint
    path_style        = var.s3_path_style
    access_key_id     = var.s3_access_key
    secret_access_key = var.s3_secret_key
    keep_last         = 14
  }
}
