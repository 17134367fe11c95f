// Package checksum provides the checksum stage, which records a SHA-256
// digest of the bytes a stream's sinks receive (the stored bytes, when it is
// the last stage), and the check a restore runs against a recorded digest.
//
// SHA-256 because `sha256sum` can verify a stored object without pipe, and
// Go's implementation uses the CPU's SHA extensions (about 2 GB/s a core
// here), faster than the disks and networks it guards. It must not import a
// plugin or the CLI.
package checksum
