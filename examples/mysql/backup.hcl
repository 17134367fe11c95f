# Back up a MariaDB or MySQL database (mariadb-dump or mysqldump with
# --single-transaction: a consistent InnoDB snapshot) through zstd and age
# to an S3 bucket.
#
#   pipe keygen --if-missing
#   export PIPE_VAR_mysql_password=…          # goes to the client in a 0600 option file, never on a command line
#   pipe run examples/mysql/backup.hcl --var bucket=my-backups --var database=shop

variable "mysql_host" { default = "localhost" }
variable "mysql_port" { default = 3306 }
variable "mysql_user" { default = "root" }
variable "database" {}

variable "mysql_password" {
  sensitive = true
}

variable "bucket" {}
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

pipeline "backup" {
  source "mysql" {
    host     = var.mysql_host
    port     = var.mysql_port
    user     = var.mysql_user
    password = var.mysql_password
    database = var.database
  }

  compress {
    codec = "zstd"
  }

  encrypt {
    recipients = [file("keys/backup.pub")]
  }

  checksum {}

  sink "s3" {
    bucket            = var.bucket
    key               = "mysql/${var.database}/${run.id}/"
    endpoint          = var.s3_endpoint
    path_style        = var.s3_path_style
    access_key_id     = var.s3_access_key
    secret_access_key = var.s3_secret_key
  }
}
