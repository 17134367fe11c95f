//go:build !linux

package plugin

import "os"

// setPipeSize keeps the system's pipe buffer: only Linux can change it.
func setPipeSize(f *os.File, n int) {}
