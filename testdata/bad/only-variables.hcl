# Variables, but no pipeline.
variable "data" {
  default = "examples/data"
}
