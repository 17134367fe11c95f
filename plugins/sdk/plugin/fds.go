package plugin

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"

	"github.com/pipebackup/pipe/plugins/internal/wire"
)

// fdChannel sends file descriptors to pipe: one message per file, its
// 8-byte token as the payload, the descriptor as SCM_RIGHTS.
type fdChannel struct {
	mu   sync.Mutex
	conn *net.UnixConn
}

// openFDChannel returns the channel pipe passed, or nil without one.
func openFDChannel() *fdChannel {
	n, err := strconv.Atoi(os.Getenv(wire.FDEnv))
	if err != nil || n < 3 {
		return nil
	}
	f := os.NewFile(uintptr(n), "pipe-fds")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil
	}
	return &fdChannel{conn: uc}
}

// send hands f over under token. f stays open here: pipe gets a
// duplicate. The descriptor is read without Fd(), which would switch the
// file to blocking mode for both processes.
func (c *fdChannel) send(token uint64, f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], token)
	var sendErr error
	c.mu.Lock()
	defer c.mu.Unlock()
	err = raw.Control(func(fd uintptr) {
		_, _, sendErr = c.conn.WriteMsgUnix(b[:], syscall.UnixRights(int(fd)), nil)
	})
	if err == nil {
		err = sendErr
	}
	if err != nil {
		return fmt.Errorf("handing the file to pipe: %w", err)
	}
	return nil
}
