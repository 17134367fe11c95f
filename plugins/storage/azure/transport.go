package azure

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// ioBuffer is the size of the HTTP transport's read and write buffers (Go's
// default is 4 KiB, a system call per 4 KiB of a 16 MiB block).
const ioBuffer = 256 << 10

// newHTTPClient returns the client azcore sends requests with: a pool that
// keeps enough idle connections for every block in flight of several
// objects at once, large buffers, no transparent compression (a ranged
// read must get the stored bytes), and a stall timeout on every connection
// (see stallConn) instead of a deadline on whole requests, so a slow but
// moving transfer is never cut while a stalled one fails in bounded time.
func newHTTPClient(concurrency int, stall time.Duration) *http.Client {
	dialer := &net.Dialer{Timeout: min(stall, 30*time.Second), KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return newStallConn(c, stall), nil
		},
		MaxIdleConns:          0, // no global cap
		MaxIdleConnsPerHost:   poolSize(concurrency),
		IdleConnTimeout:       stall / 2, // before the stall timeout would end an idle connection
		TLSHandshakeTimeout:   min(stall, 30*time.Second),
		ResponseHeaderTimeout: stall,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		WriteBufferSize:       ioBuffer,
		ReadBufferSize:        ioBuffer,
	}
	return &http.Client{Transport: t}
}

// poolSize is how many idle connections to one host the pool keeps: every
// block of four objects in flight at once (pipe's profiles move two), so
// connections are reused instead of redialled.
func poolSize(concurrency int) int { return max(8, 4*concurrency) }

// stallConn fails a read or write once the connection has moved no byte in
// either direction for stall. Every byte moved pushes the deadline of both
// directions forward, so a response that is awaited while a long request
// body is still being sent does not time out.
type stallConn struct {
	net.Conn
	stall time.Duration
	last  atomic.Int64 // unix nanoseconds of the last deadline update
}

func newStallConn(c net.Conn, stall time.Duration) *stallConn {
	s := &stallConn{Conn: c, stall: stall}
	s.progress(true)
	return s
}

// progress moves the deadline; updates closer together than a 50th of the
// stall time are skipped (they would not change anything that matters).
func (c *stallConn) progress(force bool) {
	now := time.Now()
	if !force && now.UnixNano()-c.last.Load() < int64(c.stall/50) {
		return
	}
	c.last.Store(now.UnixNano())
	c.Conn.SetDeadline(now.Add(c.stall))
}

func (c *stallConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.progress(false)
	}
	return n, err
}

func (c *stallConn) Write(p []byte) (int, error) {
	// A write starts after a pause (a new request on a pooled connection):
	// its deadline counts from now.
	c.progress(false)
	n, err := c.Conn.Write(p)
	if n > 0 {
		c.progress(false)
	}
	return n, err
}
