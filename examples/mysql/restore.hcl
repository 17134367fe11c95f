# Restore the newest MariaDB/MySQL backup of a database into target
# (created if missing) through the mariadb or mysql client.
#
#   export PIPE_VAR_mysql_password=…
#   pipe run examples/mysql/restore.hcl --var bucket=my-backups --var database=shop --var target=shop_restored

variable "mysql_host" { default = "localhost" }
variable "mysql_port" { default = 3306 }
variable "mysql_user" { default = "root" }
variable "database" {}
variable "target" {}

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

pipeline "restore" {
  source "s3" {
    bucket            = var.bucket
    prefix            = "mysql/${var.database}/"
    endpoint          = var.s3_endpoint
    path_style        = var.s3_path_style
    access_key_id     = var.s3_access_key
    secret_access_key = var.s3_secret_key
  }

  decrypt {
    identities = [file("keys/backup.key")]
  }

  decompress {}

  sink "mysql" {
    host            = var.mysql_host
    port            = var.mysql_port
    user            = var.mysql_user
    password        = var.mysql_password
    database        = var.target
    create_database = true
  }
}
