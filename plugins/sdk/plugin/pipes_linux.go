package plugin

import (
	"os"

	"golang.org/x/sys/unix"
)

// setPipeSize asks for a pipe buffer of n bytes; a system that grants less
// (pipe-max-size) is fine.
func setPipeSize(f *os.File, n int) {
	raw, err := f.SyscallConn()
	if err != nil {
		return
	}
	raw.Control(func(fd uintptr) { unix.FcntlInt(fd, unix.F_SETPIPE_SZ, n) })
}
