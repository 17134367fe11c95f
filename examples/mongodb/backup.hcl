# Back up a MongoDB deployment as one mongodump archive through zstd and age
# encryption to an S3 bucket. mongodump does the reading (the exec source);
# pipe compresses, encrypts, checksums and uploads what it prints. See
# README.md.
#
#   pipe keygen --if-missing                        # keys/backup.pub, keys/backup.key
#   export PIPE_VAR_mongo_password=…                # never in the file
#   pipe run examples/mongodb/backup.hcl --var bucket=my-backups

variable "mongo_uri" {
  description = "The deployment to back up, without a password (it goes in mongo_password)."
  default     = "mongodb://backup@localhost:27017/?authSource=admin"
}

variable "mongo_password" {
  description = "Handed to mongodump in a --config file on a pipe (file descriptor 3), so it is on no command line and in no file."
  sensitive   = true
}

variable "bucket" {}
variable "prefix" { default = "mongodb" }

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
    # No shell variable is written ${…}: pipe would read it as its own.
    command = ["sh", "-c", <<-EOT
      exec mongodump --archive --uri="$MONGO_URI" --config=/dev/fd/3 3<<EOF
      password: |-
        $MONGO_PASSWORD
      EOF
    EOT
    ]
    env  = { MONGO_URI = var.mongo_uri, MONGO_PASSWORD = var.mongo_password }
    name = "mongodb.archive"
  }

  compress {
    codec = "zstd"
  }

  encrypt {
    recipients = [file(var.recipients)]
  }

  checksum {}

  # One folder per run; the manifest is written last, beside the archive.
  sink "s3" {
    bucket            = var.bucket
    key               = "${var.prefix}/${run.id}/"
    endpoint          = var.s3_endpoint
    path_style        = var.s3_path_style
    access_key_id     = var.s3_access_key
    secret_access_key = var.s3_secret_key
  }
}
