package host

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
)

// fdReceiver takes the file descriptors a plugin hands over on its
// descriptor socket and gives each to the call waiting for its token.
type fdReceiver struct {
	conn *net.UnixConn

	mu      sync.Mutex
	files   map[uint64]*os.File
	waiting map[uint64]chan *os.File
	err     error // the socket is closed
}

// newFDChannel makes the socket pair; child goes to the plugin process.
func newFDChannel() (*fdReceiver, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	host := os.NewFile(uintptr(fds[0]), "pipe-fds")
	child := os.NewFile(uintptr(fds[1]), "pipe-fds-child")
	c, err := net.FileConn(host)
	host.Close()
	if err != nil {
		child.Close()
		return nil, nil, err
	}
	r := &fdReceiver{conn: c.(*net.UnixConn), files: map[uint64]*os.File{}, waiting: map[uint64]chan *os.File{}}
	go r.loop()
	return r, child, nil
}

func (r *fdReceiver) loop() {
	buf := make([]byte, 8)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := r.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			r.fail(err)
			return
		}
		if n != 8 {
			continue
		}
		token := binary.LittleEndian.Uint64(buf)
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil || len(msgs) != 1 {
			continue
		}
		fds, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			for _, fd := range fds {
				syscall.Close(fd)
			}
			continue
		}
		syscall.CloseOnExec(fds[0])
		f := os.NewFile(uintptr(fds[0]), fmt.Sprintf("plugin-file-%d", token))
		r.mu.Lock()
		if ch, ok := r.waiting[token]; ok {
			delete(r.waiting, token)
			ch <- f
		} else {
			r.files[token] = f
		}
		r.mu.Unlock()
	}
}

func (r *fdReceiver) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.err = err
	for t, ch := range r.waiting {
		close(ch)
		delete(r.waiting, t)
	}
}

// take returns the file sent under token, waiting for it to arrive.
func (r *fdReceiver) take(ctx context.Context, token uint64) (*os.File, error) {
	r.mu.Lock()
	if f, ok := r.files[token]; ok {
		delete(r.files, token)
		r.mu.Unlock()
		return f, nil
	}
	if r.err != nil {
		r.mu.Unlock()
		return nil, fmt.Errorf("the plugin's descriptor socket is closed: %w", r.err)
	}
	ch := make(chan *os.File, 1)
	r.waiting[token] = ch
	r.mu.Unlock()
	select {
	case f, ok := <-ch:
		if !ok {
			return nil, errors.New("the plugin's descriptor socket closed before the file arrived")
		}
		return f, nil
	case <-ctx.Done():
		r.mu.Lock()
		delete(r.waiting, token)
		r.mu.Unlock()
		return nil, context.Cause(ctx)
	}
}

func (r *fdReceiver) close() { r.conn.Close() }
