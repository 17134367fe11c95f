# Quickstart: back up a folder through zstd and age encryption to a local
# folder, then restore the newest backup. `make run` runs both and compares
# the restored files with the originals.
#
#   pipe keygen --if-missing                 # keys/backup.key and keys/backup.pub
#   pipe run examples/quickstart.hcl --pipeline backup
#   pipe run examples/quickstart.hcl --pipeline restore

variable "data" {
  description = "The folder to back up."
  default     = "examples/data"
}

pipeline "backup" {
  profile = "balanced"

  source "fs" {
    path = var.data
  }

  compress {
    codec = "zstd"
  }

  encrypt {
    recipients = [file("keys/backup.pub")]
  }

  checksum {}

  # One folder per run; the manifest is written last, beside the objects.
  sink "fs" {
    path = "backups/${pipeline.name}/${run.id}/"
  }
}

pipeline "restore" {
  # The newest run's manifest under this folder says what to restore.
  source "fs" {
    path = "backups/backup/"
  }

  decrypt {
    identities = [file("keys/backup.key")]
  }

  decompress {}

  sink "fs" {
    path = "out/restored/"
  }
}
