//go:build linux && (amd64 || arm64)

package sdk

import (
	"os"
	"syscall"
)

// StartWriteback asks the kernel to start writing a range of f to disk
// (sync_file_range with SYNC_FILE_RANGE_WRITE, which does not wait), so
// that a later fsync finds little left to do. Only a hint: a filesystem
// without it still gets the fsync.
func StartWriteback(f *os.File, off, n int64) {
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = raw.Control(func(fd uintptr) {
		const syncFileRangeWrite = 2 // SYNC_FILE_RANGE_WRITE
		_, _, _ = syscall.Syscall6(syscall.SYS_SYNC_FILE_RANGE, fd, uintptr(off), uintptr(n), syncFileRangeWrite, 0, 0)
	})
}
