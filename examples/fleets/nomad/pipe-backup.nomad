# A periodic Nomad batch job that runs examples/fleets/backup.hcl for every
# database of var.databases, one task group each (see ../README.md):
#
#   nomad var put -in hcl nomad/jobs/pipe-backup @s3.nv.hcl        # s3_access_key, s3_secret_key
#   nomad var put -in hcl nomad/jobs/pipe-backup/shop @shop.nv.hcl # pg_password
#   nomad var put -in hcl nomad/jobs/pipe-backup/billing @billing.nv.hcl
#   nomad job run examples/fleets/nomad/pipe-backup.nomad          # from the repository root
#
# A job's ID is its block label, which HCL cannot take from a variable, so
# one file cannot become a job per database with -var; a group per database
# gives each its own allocation, restarts and exit status. The password of a
# database is in a Nomad Variable only its group can read; the S3 keys in
# one every group of the job can read. Templates render them into the task's
# environment: no secret is in this file or on a command line.
#
# The extension is .nomad, not .hcl: examples_test.go validates every .hcl
# file under examples/ as a pipeline file.

variable "databases" {
  description = "The databases to back up, by name: their server and how many runs to keep."
  type = map(object({
    host      = string
    keep_last = number
  }))
  default = {
    shop    = { host = "shop-db.service.consul", keep_last = 14 }
    billing = { host = "billing-db.service.consul", keep_last = 30 }
  }
}

variable "bucket" {
  type    = string
  default = "acme-db-backups"
}

# Where each run pushes its metrics (job "pipe", grouped by file and
# database); a failed push is a warning, never a failed backup.
variable "pushgateway" {
  type    = string
  default = "http://pushgateway.service.consul:9091"
}

variable "image" {
  type    = string
  default = "registry.example.com/pipe:0.1.0"
}

# Read by the nomad CLI when the job is submitted; relative paths start at
# its working directory.
variable "pipeline_file" {
  type    = string
  default = "examples/fleets/backup.hcl"
}

variable "public_key_file" {
  type    = string
  default = "keys/backup.pub"
}

job "pipe-backup" {
  type = "batch"

  periodic {
    crons            = ["15 2 * * *"]
    time_zone        = "UTC"
    prohibit_overlap = true # no new launch while a group of the last one still runs
  }

  dynamic "group" {
    for_each = var.databases
    labels   = [group.key]

    content {
      # A failed run (exit 1) is retried twice on the same node, each a new
      # run; then the allocation fails and is not rescheduled: the next
      # launch is tomorrow's.
      restart {
        attempts = 2
        interval = "6h"
        delay    = "10m"
        mode     = "fail"
      }

      reschedule {
        attempts  = 0
        unlimited = false
      }

      task "pipe" {
        driver       = "docker"
        kill_signal  = "SIGTERM"
        kill_timeout = "60s" # time to abort multipart uploads

        config {
          image   = var.image
          command = "pipe"
          args = [
            "run", "/etc/pipe/backup.hcl",
            "--var", "database=${group.key}",
            "--var", "pg_host=${group.value.host}",
            "--var", "keep_last=${group.value.keep_last}",
            "--progress", "never",
            "--json",
            "--pushgateway", var.pushgateway,
            "--metrics-label", "database=${group.key}",
          ]
          work_dir        = "/etc/pipe"
          readonly_rootfs = true
          # The templates below, relative to the task directory.
          volumes = ["local/pipe:/etc/pipe:ro"]

          # The plugin processes' sockets, pg_dump's temporary files.
          mount {
            type   = "tmpfs"
            target = "/tmp"
            tmpfs_options {
              size = 67108864
            }
          }
        }

        user = "65532:65532"

        env {
          PIPE_VAR_bucket = var.bucket
        }

        template {
          data        = file(var.pipeline_file)
          destination = "local/pipe/backup.hcl"
          change_mode = "noop"
        }

        template {
          data        = file(var.public_key_file)
          destination = "local/pipe/keys/backup.pub"
          change_mode = "noop"
        }

        template {
          data        = <<-EOT
            {{ with nomadVar "nomad/jobs/pipe-backup/${group.key}" }}
            PIPE_VAR_pg_password={{ .pg_password | toJSON }}
            {{ end }}
            {{ with nomadVar "nomad/jobs/pipe-backup" }}
            PIPE_VAR_s3_access_key={{ .s3_access_key | toJSON }}
            PIPE_VAR_s3_secret_key={{ .s3_secret_key | toJSON }}
            {{ end }}
          EOT
          destination = "secrets/pipe.env"
          env         = true
          change_mode = "noop"
        }

        # `pipe plan` prints a 216 MiB budget for backup.hcl; pg_dump runs in
        # the same container, hence the room above it.
        resources {
          cpu    = 1000 # MHz
          memory = 512  # MiB
        }
      }
    }
  }
}
