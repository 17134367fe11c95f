package s3

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// newTransport returns an HTTP transport for bulk transfer: HTTP/1.1 over
// many connections (one per part in flight; S3 does not speak HTTP/2, and
// multiplexing parts over one connection would serialise them anyway), an
// idle pool large enough that parallel parts reuse connections instead of
// opening new ones (Go's default keeps 2 per host), large buffers, no
// transparent gzip (the data is compressed and encrypted already, and a
// ranged read must get the bytes it asked for), and a stall timeout on
// every connection.
func newTransport(c connConfig) *http.Transport {
	dialer := &net.Dialer{Timeout: c.ConnectTimeout, KeepAlive: 30 * time.Second}
	idle := c.Connections
	if idle == 0 {
		idle = max(64, 16*c.Concurrency)
	}
	idleTimeout := 90 * time.Second
	if c.Timeout > 0 {
		// An idle connection's pending read would hit the stall deadline
		// after timeout; close it cleanly before that.
		idleTimeout = min(idleTimeout, c.Timeout/2)
	}
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil || c.Timeout <= 0 {
				return conn, err
			}
			return newStallConn(conn, c.Timeout), nil
		},
		ForceAttemptHTTP2:     false,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   c.ConnectTimeout,
		MaxIdleConns:          idle,
		MaxIdleConnsPerHost:   idle,
		IdleConnTimeout:       idleTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ReadBufferSize:        int(c.ReadBuffer),
		WriteBufferSize:       int(c.WriteBuffer),
	}
}

// stallConn fails a Read or Write when the connection moved no byte on
// the wire, in either direction, for timeout: a stalled network or server
// then shows as a timeout error, which the SDK retries on a new connection
// (and a restore resumes), instead of a request that hangs forever.
//
// Progress is what the kernel reports where it can (Linux: bytes the peer
// acknowledged plus bytes received), not only what pipe itself wrote or
// read: a part handed to the socket's buffers is still moving while pipe
// waits for the answer, which on a slow link can take seconds. Each
// transfer pushes both deadlines forward (a request being written keeps
// the wait for its answer alive), at most every timeout/16 to keep the
// cost low; when a deadline passes, the wire's progress since the last
// push decides whether to wait on.
type stallConn struct {
	net.Conn
	timeout  time.Duration
	progress func() (uint64, bool) // nil where the OS does not tell
	last     atomic.Int64          // unix nanoseconds of the last push
	seen     atomic.Uint64         // progress at the last push
	mu       sync.Mutex            // serialises decisions after a timeout
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
	c.Conn.SetDeadline(now.Add(c.timeout))
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

func (c *stallConn) Read(b []byte) (int, error) {
	c.push(false)
	for {
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.push(false)
		}
		if n > 0 || err == nil || !c.waitOn(err) {
			return n, err
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
		if err == nil || !c.waitOn(err) {
			return written, err
		}
	}
}
