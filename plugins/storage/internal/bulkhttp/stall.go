package bulkhttp

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// stallConn fails a Read or Write when the connection moved no byte on
// the wire, in either direction, for timeout: a stalled network or server
// then shows as a *StallError, which store clients retry on a new
// connection (and a restore resumes), instead of a request that hangs
// forever.
//
// Progress is what the kernel reports where it can (Linux: bytes the peer
// acknowledged plus bytes received), not only what pipe itself wrote or
// read: a part handed to the socket's buffers is still moving while pipe
// waits for the answer, which on a slow link can take seconds. Each
// transfer pushes both deadlines forward (a request being written keeps
// the wait for its answer alive), at most every timeout/16 to keep the
// cost low; when a deadline passes, the wire's progress since the last
// push decides whether to wait on.
//
// A Read or Write starts by pushing the deadlines, so time in which no
// one read or wrote (a caller that does not read an answer, a connection
// idle in the pool) is not a stall. HTTP/1.1 reads a connection only when
// the caller reads the answer's body; under HTTP/2 a slow reader would
// stall every stream of its connection, which is one reason the transport
// does not speak it.
type stallConn struct {
	net.Conn
	timeout  time.Duration
	progress func() (uint64, bool)      // nil where the OS does not tell
	last     atomic.Int64               // unix nanoseconds of the last push
	seen     atomic.Uint64              // progress at the last push
	mu       sync.Mutex                 // serialises decisions after a timeout
	stall    atomic.Pointer[StallError] // set once a call found the connection stalled
}

func newStallConn(c net.Conn, timeout time.Duration) *stallConn {
	sc := &stallConn{Conn: c, timeout: timeout, progress: wireProgress(c)}
	sc.push(true)
	return sc
}

// push moves the deadlines to timeout from now.
func (c *stallConn) push(force bool) {
	now := time.Now()
	if !force && time.Duration(now.UnixNano()-c.last.Load()) < c.timeout/16 {
		return
	}
	if c.progress != nil {
		if p, ok := c.progress(); ok {
			c.seen.Store(p)
		}
	}
	c.last.Store(now.UnixNano())
	_ = c.Conn.SetDeadline(now.Add(c.timeout))
}

// waitOn decides, after a deadline passed, whether the connection is
// alive after all: another call pushed the deadline meanwhile, or bytes
// moved on the wire since the last push.
func (c *stallConn) waitOn(err error) bool {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Duration(time.Now().UnixNano()-c.last.Load()) < c.timeout {
		return true
	}
	if c.progress == nil {
		return false
	}
	p, ok := c.progress()
	if !ok || p == c.seen.Load() {
		return false
	}
	c.push(true)
	return true
}

// stalled is err, a stall when it is a timeout of the deadline or when
// the connection stalled before: the transport then closes it, and the
// call in the other direction fails with "use of closed network
// connection", which is the stall too.
func (c *stallConn) stalled(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		se := &StallError{After: c.timeout, err: err}
		c.stall.CompareAndSwap(nil, se)
		return se
	}
	if se := c.stall.Load(); se != nil {
		return &StallError{After: c.timeout, err: errors.Join(err, se.err)}
	}
	return err
}

func (c *stallConn) Read(b []byte) (int, error) {
	c.push(false) // time no one read (a caller that paused) is no stall
	for {
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.push(false)
		}
		if n > 0 || err == nil {
			return n, err
		}
		if !c.waitOn(err) {
			return n, c.stalled(err)
		}
	}
}

func (c *stallConn) Write(b []byte) (int, error) {
	c.push(false)
	written := 0
	for {
		n, err := c.Conn.Write(b[written:])
		written += n
		if n > 0 {
			c.push(false)
		}
		if err == nil {
			return written, nil
		}
		if !c.waitOn(err) {
			return written, c.stalled(err)
		}
	}
}
