package gcs

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
)

// newTransport is the HTTP transport for bulk data: Go's defaults keep 2
// idle connections per host and move data through 4 KiB buffers.
func newTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 100
	t.IdleConnTimeout = 50 * time.Second
	t.ReadBufferSize = 256 << 10
	t.WriteBufferSize = 256 << 10
	// Broken HTTP/2 connections are found by pings instead of waiting for
	// the kernel to give up on them.
	t.HTTP2 = &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second}
	return t
}

// stallError is a request that moved no byte for too long. The library
// retries it like a dropped connection (it is Temporary).
type stallError struct{ d time.Duration }

func (e *stallError) Error() string {
	return fmt.Sprintf("no byte moved for %s (timeout)", e.d)
}
func (e *stallError) Timeout() bool   { return true }
func (e *stallError) Temporary() bool { return true }

// watchdog abandons requests that stall: no byte of the request body
// taken by the connection, no response, or a read of the response body
// that returns nothing, for stall. Time the caller spends between reads
// of a response (a slow consumer) does not count, so backpressure is not
// mistaken for a stall.
type watchdog struct {
	base  http.RoundTripper
	stall time.Duration
}

func (t *watchdog) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx, cancel := context.WithCancelCause(req.Context())
	w := newWatch(t.stall, cancel)
	r := req.WithContext(ctx)
	if req.Body != nil && req.Body != http.NoBody {
		r.Body = &watchedBody{rc: req.Body, w: w}
		if req.GetBody != nil {
			r.GetBody = func() (io.ReadCloser, error) {
				b, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				return &watchedBody{rc: b, w: w}, nil
			}
		}
	}
	resp, err := t.base.RoundTrip(r)
	if err != nil {
		stalled := w.stop()
		cancel(nil)
		if stalled {
			return nil, &stallError{t.stall}
		}
		return nil, err
	}
	w.disarm()
	resp.Body = &watchedResponse{rc: resp.Body, w: w, cancel: cancel, stall: t.stall}
	return resp, nil
}

// watch fires cancel when it has been armed for stall without progress.
type watch struct {
	stall  time.Duration
	cancel context.CancelCauseFunc
	mu     sync.Mutex
	armed  bool
	last   time.Time
	fired  bool
	done   bool
	timer  *time.Timer
}

func newWatch(stall time.Duration, cancel context.CancelCauseFunc) *watch {
	w := &watch{stall: stall, cancel: cancel, armed: true, last: time.Now()}
	w.mu.Lock()
	w.timer = time.AfterFunc(stall, w.check)
	w.mu.Unlock()
	return w
}

func (w *watch) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return
	}
	wait := w.stall
	if w.armed {
		idle := time.Since(w.last)
		if idle >= w.stall {
			w.fired, w.done = true, true
			w.cancel(&stallError{w.stall})
			return
		}
		wait = w.stall - idle
	}
	w.timer.Reset(wait)
}

// progress records that bytes moved (and arms the watch).
func (w *watch) progress() {
	w.mu.Lock()
	w.armed, w.last = true, time.Now()
	w.mu.Unlock()
}

func (w *watch) disarm() {
	w.mu.Lock()
	w.armed = false
	w.mu.Unlock()
}

// stop ends the watch and reports whether it had fired.
func (w *watch) stop() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.done = true
	w.timer.Stop()
	return w.fired
}

func (w *watch) stalled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}

// watchedBody is a request body: the connection taking bytes is progress.
type watchedBody struct {
	rc io.ReadCloser
	w  *watch
}

func (b *watchedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.w.progress()
	return n, err
}

func (b *watchedBody) Close() error { return b.rc.Close() }

// watchedResponse is a response body: only time spent inside Read counts.
type watchedResponse struct {
	rc     io.ReadCloser
	w      *watch
	cancel context.CancelCauseFunc
	stall  time.Duration
}

func (b *watchedResponse) Read(p []byte) (int, error) {
	b.w.progress()
	n, err := b.rc.Read(p)
	b.w.disarm()
	if err != nil && err != io.EOF && b.w.stalled() {
		return n, &stallError{b.stall}
	}
	return n, err
}

func (b *watchedResponse) Close() error {
	b.w.stop()
	err := b.rc.Close()
	b.cancel(nil)
	return err
}
