# Object names are printed and stored in manifests: a sensitive variable
# cannot go into a sink's path, a source's path or an exec stream's name.
# vars: tenant=acme-secret-7f3a
# expect: errors=3
variable "tenant" {
  sensitive = true
}

pipeline "backup" {
  source "exec" {
    command = ["true"]
    name    = "dump-${var.tenant}"
  }
  sink "fs" {
    path = "backups/${var.tenant}/${run.id}/"
  }
}

pipeline "copy" {
  source "fs" {
    path = "data/${var.tenant}/"
  }
  sink "fs" {
    path = "copies/"
  }
}
