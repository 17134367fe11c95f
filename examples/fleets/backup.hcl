# One PostgreSQL database through zstd and age to S3: the pipeline file every
# job of a fleet runs, one job per database (kubernetes/, nomad/; see
# README.md). Jobs differ only by their variables:
#
#   cd /etc/pipe    # backup.hcl and keys/backup.pub, from a ConfigMap or templates
#   pipe run /etc/pipe/backup.hcl --var database=shop --var pg_host=db1.internal --progress never --json
#
# with PIPE_VAR_bucket, and PIPE_VAR_pg_password, PIPE_VAR_s3_access_key and
# PIPE_VAR_s3_secret_key from the scheduler's secrets: never in a file, never
# on a command line.

variable "database" {
  description = "The database to back up; also its folder in the bucket."
}

variable "pg_host" { default = "localhost" }
variable "pg_port" { default = 5432 }
variable "pg_user" { default = "backup" }

variable "pg_password" {
  description = "Given to pg_dump in PGPASSWORD: never on a command line, never printed."
  sensitive   = true
}

variable "public_key" {
  description = "The age recipient (pipe keygen's .pub file); relative paths start at the working directory."
  default     = "keys/backup.pub"
}

variable "bucket" {}
variable "prefix" { default = "pg" }
variable "keep_last" { default = 14 }

variable "s3_endpoint" {
  description = "Empty for AWS; the store's URL for S3-compatible stores (MinIO, R2, …)."
  default     = ""
}

variable "s3_path_style" { default = false }

# Empty: the AWS SDK's chain (AWS_ACCESS_KEY_ID, web identity, an instance role).
variable "s3_access_key" {
  default   = ""
  sensitive = true
}

variable "s3_secret_key" {
  default   = ""
  sensitive = true
}

pipeline "backup" {
  # Everything that sizes memory is pinned, so the budget `pipe plan` prints
  # here is the one a job's memory limit is sized from, on any node: a
  # profile's workers follow the CPUs, and auto follows the node's memory,
  # not the container's limit.
  profile = "balanced"
  streams = 1 # pg_dump with jobs = 1 is one stream

  source "postgres" {
    host     = var.pg_host
    port     = var.pg_port
    user     = var.pg_user
    password = var.pg_password
    database = var.database
  }

  compress {
    codec   = "zstd"
    level   = 3
    workers = 2
  }

  encrypt {
    recipients = [file(var.public_key)]
  }

  checksum {}

  sink "s3" {
    bucket            = var.bucket
    key               = "${var.prefix}/${var.database}/${run.id}/"
    endpoint          = var.s3_endpoint
    path_style        = var.s3_path_style
    access_key_id     = var.s3_access_key
    secret_access_key = var.s3_secret_key
    part_size         = "16MiB" # a dump of unknown size can reach 10,000 parts: 160 GiB
    concurrency       = 4
    keep_last         = var.keep_last
  }
}
