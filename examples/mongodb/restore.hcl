# Restore the newest mongodump archive that backup.hcl stored: pipe finds
# the run's manifest, downloads and checks the object, decrypts and
# decompresses it, and mongorestore reads it from its standard input (the
# exec sink). --drop replaces each collection the archive holds. See
# README.md.
#
#   export PIPE_VAR_mongo_password=…
#   pipe run examples/mongodb/restore.hcl --var bucket=my-backups

variable "mongo_uri" {
  description = "The deployment to restore into, without a password (it goes in mongo_password)."
  default     = "mongodb://restore@localhost:27017/?authSource=admin"
}

variable "mongo_password" {
  description = "Handed to mongorestore in a --config file on a pipe (file descriptor 3): its standard input is the archive."
  sensitive   = true
}

variable "bucket" {}
variable "prefix" { default = "mongodb" }
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
    prefix            = "${var.prefix}/"
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
    command = ["sh", "-c", <<-EOT
      exec mongorestore --archive --drop --uri="$MONGO_URI" --config=/dev/fd/3 3<<EOF
      password: |-
        $MONGO_PASSWORD
      EOF
    EOT
    ]
    env = { MONGO_URI = var.mongo_uri, MONGO_PASSWORD = var.mongo_password }
  }
}
