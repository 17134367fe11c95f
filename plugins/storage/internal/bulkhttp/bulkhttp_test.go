package bulkhttp

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"testing"
	"time"
)

// A connection whose peer drains slowly is alive even while pipe itself
// neither writes nor reads (the kernel's buffers are being sent); a peer
// that stops reading is a stall.
func TestStallConnSlowPeer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const total = 8 << 20
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var mode [1]byte
				if _, err := io.ReadFull(c, mode[:]); err != nil || mode[0] == 's' {
					time.Sleep(5 * time.Second) // stalled: reads nothing more
					return
				}
				buf := make([]byte, 64<<10)
				for got := 0; got < total; {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					got += n
					time.Sleep(15 * time.Millisecond) // ~4 MB/s
				}
				c.Write([]byte("ok"))
			}()
		}
	}()
	dial := func(mode byte) *stallConn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		sc := newStallConn(c, 300*time.Millisecond)
		if sc.progress == nil {
			t.Skip("this OS does not report TCP progress")
		}
		if _, err := sc.Write([]byte{mode}); err != nil {
			t.Fatal(err)
		}
		return sc
	}

	slow := dial('d')
	start := time.Now()
	if n, err := slow.Write(make([]byte, total)); err != nil || n != total {
		t.Fatalf("writing to a slow peer: %d, %v after %s", n, err, time.Since(start))
	}
	var ok [2]byte
	if _, err := io.ReadFull(slow, ok[:]); err != nil || string(ok[:]) != "ok" {
		t.Fatalf("waiting for a slow peer: %q, %v after %s", ok, err, time.Since(start))
	}
	if time.Since(start) < time.Second {
		t.Fatalf("the peer drained %d bytes in %s: the test proves nothing", total, time.Since(start))
	}

	stalled := dial('s')
	start = time.Now()
	_, err = stalled.Write(make([]byte, total))
	var se *StallError
	var ne net.Error
	if !errors.As(err, &se) || !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("writing to a stalled peer: %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("the stall was noticed after %s", d)
	}
}

// Through the transport, a server that stops answering fails the request
// after the stall timeout with a *StallError, in every phase of it; a
// slow caller is not a stall.
func TestTransportStalls(t *testing.T) {
	const stall = 300 * time.Millisecond
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stall-headers":
			<-release
		case "/stall-body":
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
			<-release
		case "/big":
			// More than the kernel's and the transport's buffers hold:
			// a caller that does not read holds the server back.
			w.Write(make([]byte, 64<<20))
		case "/no-read":
			<-release // never reads the request body
		case "/gzip":
			if r.Header.Get("Accept-Encoding") != "" {
				http.Error(w, "asked for "+r.Header.Get("Accept-Encoding"), http.StatusBadRequest)
			}
		}
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handlers
	hc := &http.Client{Transport: NewTransport(Options{StallTimeout: stall})}
	for _, path := range []string{"/stall-headers", "/stall-body"} {
		start := time.Now()
		resp, err := hc.Get(srv.URL + path)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		var se *StallError
		var te interface{ Temporary() bool }
		if !errors.As(err, &se) || se.After != stall || !errors.As(err, &te) || !te.Temporary() || time.Since(start) > 3*time.Second {
			t.Errorf("%s: %v after %s", path, err, time.Since(start))
		}
	}

	// Time the caller takes between reads is not a stall, even when the
	// connection is quiet for longer than the timeout meanwhile.
	resp, err := hc.Get(srv.URL + "/big")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * stall)
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != 63<<20 {
		t.Errorf("a slow consumer was taken for a stall: %d bytes, %v", n, err)
	}

	// An upload whose bytes the server does not take stalls.
	start := time.Now()
	resp, err = hc.Post(srv.URL+"/no-read", "application/octet-stream", io.LimitReader(zeros{}, 256<<20))
	if err == nil {
		resp.Body.Close()
	}
	var se *StallError
	if !errors.As(err, &se) || time.Since(start) > 5*time.Second {
		t.Errorf("upload: %v after %s", err, time.Since(start))
	}
	var ue *url.Error
	if !errors.As(err, &ue) {
		t.Errorf("upload: %T is not a *url.Error", err)
	}

	// No transparent compression.
	resp, err = hc.Get(srv.URL + "/gzip")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("the transport asks for compression: %s", resp.Status)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestNewTransport(t *testing.T) {
	tr := NewTransport(Options{})
	if tr.MaxIdleConnsPerHost != 64 || tr.ReadBufferSize != 256<<10 || tr.WriteBufferSize != 256<<10 ||
		tr.TLSHandshakeTimeout != 30*time.Second || tr.IdleConnTimeout != 90*time.Second ||
		!tr.DisableCompression || tr.Proxy == nil || tr.TLSClientConfig == nil {
		t.Errorf("defaults: %+v", tr)
	}
	if tr.Protocols == nil || !tr.Protocols.HTTP1() || tr.Protocols.HTTP2() || tr.Protocols.UnencryptedHTTP2() {
		t.Errorf("protocols %v: HTTP/1.1 only", tr.Protocols)
	}
	tr = NewTransport(Options{IdleConns: 12, ReadBuffer: 1 << 20, WriteBuffer: 64 << 10, ConnectTimeout: 5 * time.Second, StallTimeout: 20 * time.Second})
	if tr.MaxIdleConnsPerHost != 12 || tr.ReadBufferSize != 1<<20 || tr.WriteBufferSize != 64<<10 ||
		tr.TLSHandshakeTimeout != 5*time.Second || tr.IdleConnTimeout != 10*time.Second {
		t.Errorf("options: %+v", tr)
	}
	// The dialer wraps connections only when there is a stall timeout.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for timeout, wrapped := range map[time.Duration]bool{0: false, time.Second: true} {
		c, err := NewTransport(Options{StallTimeout: timeout}).DialContext(t.Context(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := c.(*stallConn); ok != wrapped {
			t.Errorf("timeout %s: %T", timeout, c)
		}
		c.Close()
	}
}
