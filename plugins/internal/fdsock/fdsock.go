// Package fdsock passes open files between pipe and a plugin process on a
// Unix socket pair, in both directions: one message per file, an 8-byte
// token as its payload and the descriptor as SCM_RIGHTS. The side that
// sends a file names its token in a call of the protocol; the other side
// takes the file under that token. It is what both ends of the plugin
// protocol share, never imported by plugin authors.
package fdsock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
)

// Conn is one end of the socket.
type Conn struct {
	conn *net.UnixConn
	send sync.Mutex

	mu        sync.Mutex
	files     map[uint64]*os.File
	waiting   map[uint64]chan *os.File
	abandoned map[uint64]bool // given up on by Take: closed when they arrive
	err       error           // the socket is closed
}

// Pair makes the socket pair: the Conn stays in this process, child goes
// to the plugin process (as one of its ExtraFiles).
func Pair() (*Conn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	child := os.NewFile(uintptr(fds[1]), "pipe-fds-child")
	c, err := open(os.NewFile(uintptr(fds[0]), "pipe-fds"))
	if err != nil {
		child.Close()
		return nil, nil, err
	}
	return c, child, nil
}

// FromEnv opens the plugin's end, whose descriptor number pipe put in the
// environment variable env; nil when there is none.
func FromEnv(env string) *Conn {
	n, err := strconv.Atoi(os.Getenv(env))
	if err != nil || n < 3 {
		return nil
	}
	c, err := open(os.NewFile(uintptr(n), "pipe-fds"))
	if err != nil {
		return nil
	}
	return c
}

func open(f *os.File) (*Conn, error) {
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		nc.Close()
		return nil, errors.New("the descriptor socket is not a Unix socket")
	}
	c := &Conn{conn: uc, files: map[uint64]*os.File{}, waiting: map[uint64]chan *os.File{}, abandoned: map[uint64]bool{}}
	go c.loop()
	return c, nil
}

// Send hands f over under token. f stays open here: the other side gets a
// duplicate. The descriptor is read without Fd(), which would switch the
// file to blocking mode for both processes.
func (c *Conn) Send(token uint64, f *os.File) error {
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], token)
	var sendErr error
	c.send.Lock()
	defer c.send.Unlock()
	err = raw.Control(func(fd uintptr) {
		_, _, sendErr = c.conn.WriteMsgUnix(b[:], syscall.UnixRights(int(fd)), nil)
	})
	if err == nil {
		err = sendErr
	}
	if err != nil {
		return fmt.Errorf("handing the file over: %w", err)
	}
	return nil
}

// loop receives files until the socket closes; each goes to the call
// waiting for its token, or waits for it.
func (c *Conn) loop() {
	buf := make([]byte, 8)
	oob := make([]byte, syscall.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := c.conn.ReadMsgUnix(buf, oob)
		if err != nil {
			c.fail(err)
			return
		}
		msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
		var fds []int
		for i := range msgs {
			got, _ := syscall.ParseUnixRights(&msgs[i])
			fds = append(fds, got...)
		}
		if len(fds) != 1 || n != 8 {
			for _, fd := range fds { // not a message of ours: nothing leaks
				syscall.Close(fd)
			}
			continue
		}
		token := binary.LittleEndian.Uint64(buf)
		syscall.CloseOnExec(fds[0])
		f := os.NewFile(uintptr(fds[0]), fmt.Sprintf("handed-over-%d", token))
		c.mu.Lock()
		switch ch, ok := c.waiting[token]; {
		case ok:
			delete(c.waiting, token)
			ch <- f
		case c.abandoned[token] || c.err != nil:
			delete(c.abandoned, token)
			f.Close()
		default:
			if old, ok := c.files[token]; ok {
				old.Close() // a token used twice: the later file wins
			}
			c.files[token] = f
		}
		c.mu.Unlock()
	}
}

func (c *Conn) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.err = err
	for t, ch := range c.waiting {
		close(ch)
		delete(c.waiting, t)
	}
}

// Take returns the file sent under token, waiting for it to arrive.
func (c *Conn) Take(ctx context.Context, token uint64) (*os.File, error) {
	c.mu.Lock()
	if f, ok := c.files[token]; ok {
		delete(c.files, token)
		c.mu.Unlock()
		return f, nil
	}
	if c.err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("the descriptor socket is closed: %w", c.err)
	}
	ch := make(chan *os.File, 1)
	c.waiting[token] = ch
	c.mu.Unlock()
	select {
	case f, ok := <-ch:
		if !ok {
			return nil, errors.New("the descriptor socket closed before the file arrived")
		}
		return f, nil
	case <-ctx.Done():
		c.mu.Lock()
		if _, still := c.waiting[token]; still {
			delete(c.waiting, token)
			c.abandoned[token] = true // closed when it arrives
		}
		c.mu.Unlock()
		select { // it may have arrived meanwhile
		case f, ok := <-ch:
			if ok {
				f.Close()
			}
		default:
		}
		return nil, context.Cause(ctx)
	}
}

// Close closes this end and every file received and not taken.
func (c *Conn) Close() {
	c.conn.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = net.ErrClosed // a file the loop still reads is closed
	}
	for t, f := range c.files {
		f.Close()
		delete(c.files, t)
	}
}
