//go:build !(linux && (amd64 || arm64))

package sdk

import "os"

// StartWriteback does nothing here: the fsync writes everything.
func StartWriteback(f *os.File, off, n int64) {}
