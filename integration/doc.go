// Package integration holds the tests that run pipe against real servers
// started by testcontainers-go: object stores (MinIO, fake-gcs-server,
// Azurite), databases, and Toxiproxy between pipe and a server for network
// faults. The containers use the official image names; on machines that
// cannot pull, ../shared/testimages/build.sh builds look-alikes under the
// same names.
//
// Without a Docker engine the tests skip with a message saying how to run
// them; in CI (CI=true) a missing engine is a failure.
package integration
