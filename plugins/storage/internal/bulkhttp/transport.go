package bulkhttp

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Options tune a transport. The zero value is usable: no stall timeout.
type Options struct {
	// IdleConns is how many idle connections to one host the pool keeps;
	// 0 is 64.
	IdleConns int
	// ReadBuffer and WriteBuffer are each connection's buffer sizes; 0
	// is 256 KiB (Go's default is 4 KiB, a system call per 4 KiB).
	ReadBuffer, WriteBuffer int
	// ConnectTimeout bounds connecting: TCP, then the TLS handshake; 0
	// is 30 s.
	ConnectTimeout time.Duration
	// StallTimeout is how long a connection may move no byte while a
	// request is in flight before the request fails with a *StallError;
	// 0 waits forever.
	StallTimeout time.Duration
}

const (
	defaultIdleConns      = 64
	defaultBuffer         = 256 << 10
	defaultConnectTimeout = 30 * time.Second
	maxIdleTime           = 90 * time.Second
)

// NewTransport returns a transport for bulk transfer, as the package doc
// says. Callers may adjust it before its first request (the TLS
// configuration's roots, say).
func NewTransport(o Options) *http.Transport {
	if o.IdleConns <= 0 {
		o.IdleConns = defaultIdleConns
	}
	if o.ReadBuffer <= 0 {
		o.ReadBuffer = defaultBuffer
	}
	if o.WriteBuffer <= 0 {
		o.WriteBuffer = defaultBuffer
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = defaultConnectTimeout
	}
	dialer := &net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 30 * time.Second}
	idleTimeout := maxIdleTime
	if o.StallTimeout > 0 {
		// An idle connection's pending read would hit the stall deadline
		// after the timeout; close it cleanly before that.
		idleTimeout = min(idleTimeout, o.StallTimeout/2)
	}
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	return &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := dialer.DialContext(ctx, network, addr)
			if err != nil || o.StallTimeout <= 0 {
				return conn, err
			}
			return newStallConn(conn, o.StallTimeout), nil
		},
		Protocols:             protocols,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   o.ConnectTimeout,
		MaxIdleConns:          0, // no cap across hosts
		MaxIdleConnsPerHost:   o.IdleConns,
		IdleConnTimeout:       idleTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
		ReadBufferSize:        o.ReadBuffer,
		WriteBufferSize:       o.WriteBuffer,
	}
}

// StallError is a request whose connection moved no byte for the stall
// timeout. It is a net.Error that is Timeout and Temporary, so store
// clients retry it (on a new connection) like a dropped one; it unwraps
// to the deadline's error.
type StallError struct {
	After time.Duration // the stall timeout
	err   error
}

func (e *StallError) Error() string {
	return fmt.Sprintf("no byte moved for %s (timeout)", e.After)
}

func (e *StallError) Unwrap() error { return e.err }

// Timeout is true: it is a net.Error for a timeout.
func (e *StallError) Timeout() bool { return true }

// Temporary is true: another attempt, on another connection, may go
// through.
func (e *StallError) Temporary() bool { return true }

var _ net.Error = (*StallError)(nil)
