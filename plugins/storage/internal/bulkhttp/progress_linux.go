package bulkhttp

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// wireProgress returns a counter of the bytes a TCP connection moved on
// the wire: acknowledged by the peer plus received. It grows while the
// kernel sends what pipe handed it long ago.
func wireProgress(c net.Conn) func() (uint64, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return func() (uint64, bool) {
		var info *unix.TCPInfo
		var gerr error
		if err := raw.Control(func(fd uintptr) {
			info, gerr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		}); err != nil || gerr != nil {
			return 0, false
		}
		return info.Bytes_acked + info.Bytes_received, true
	}
}
