# Restore the newest PostgreSQL backup under the prefix into a database:
# custom format through pg_restore, a parallel backup schema first, then the
# tables' data on jobs connections, then indexes and constraints with
# pg_restore --jobs. See the Databases section of the top-level README.md.
#
#   export PIPE_VAR_pg_password=…
#   pipe run examples/postgres/restore.hcl --var bucket=my-backups --var database=shop --var target=shop_restored

variable "pg_host" { default = "localhost" }
variable "pg_port" { default = 5432 }
variable "pg_user" { default = "postgres" }

variable "pg_password" {
  sensitive = true
}

variable "database" {
  description = "The database whose backups to read (the backup's prefix)."
  default     = "postgres"
}

variable "target" {
  description = "The database to restore into; created if missing."
}

variable "jobs" { default = 4 }
variable "bucket" {}
variable "prefix" { default = "pg" }
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

pipeline "restore" {
  source "s3" {
    bucket            = var.bucket
    prefix            = "${var.prefix}/${var.database}/"
    endpoint          = var.s3_endpoint
    path_style        = var.s3_path_style
    access_key_id     = var.s3_access_key
    secret_access_key = var.s3_secret_key
  }

  decrypt {
    identities = [file("keys/backup.key")]
  }

  decompress {}

  sink "postgres" {
    host     = var.pg_host
    port     = var.pg_port
    user     = var.pg_user
    password = var.pg_password
    database = var.target
    create   = true
    jobs     = var.jobs
  }
}
