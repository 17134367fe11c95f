// Package version holds pipe's version: the one value `pipe --version`
// prints, manifests record as pipe_version, metrics carry as a label and the
// built-in endpoints report as their plugin's version. The Makefile sets it
// when it links pipe (-ldflags "-X .../internal/version.Version=..."). It
// imports nothing and must not: every layer may read it.
package version

// Version is set at link time by the Makefile (`git describe`); a plain
// `go build` or `go test` says "0.1.0-dev".
var Version = "0.1.0-dev"
