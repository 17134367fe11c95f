package untar

import (
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback asks the kernel to start writing n bytes of f from off
// to disk (sync_file_range with SYNC_FILE_RANGE_WRITE, which does not
// wait). Only a hint: SyncTree's fsync is what makes the file durable.
func startWriteback(f *os.File, off, n int64) {
	_ = unix.SyncFileRange(int(f.Fd()), off, n, unix.SYNC_FILE_RANGE_WRITE)
}
