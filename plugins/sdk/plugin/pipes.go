package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/pipebackup/pipe/plugins/internal/wire"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/ospipe"
)

// Streams and objects that are no OS file (an object store's download or
// upload, say) cross the plugin boundary through a pipe when pipe takes
// descriptors: a goroutine here copies between the endpoint and one end
// of the pipe while pipe reads or writes the other end itself, as it does
// a command's pipe. That costs two copies in the kernel per byte, where
// gRPC messages cost protobuf framing, HTTP/2 flow control and several
// copies in both processes (by hand, 2 GiB from MinIO: 7.4 s through
// messages, 6.0 s through a pipe; `make bench` measures the pipe against
// pipe in one process).

// newPipe returns a pipe with a large buffer (ospipe.Size: Linux's
// default is 64 KiB, a wake-up per 64 KiB), both ends in the poller: this
// process reads or writes one of them itself.
func newPipe() (r, w *os.File, err error) {
	r, w, err = os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	ospipe.Grow(w)
	return r, w, nil
}

// pipedStream serves a stream through a pipe (an sdk.FileReader): pump
// copies the stream into the write end, and pipe reads the read end.
type pipedStream struct {
	rc     io.ReadCloser
	r, w   *os.File
	cancel context.CancelFunc // the stream's context: Done without EOF ends it
	done   chan struct{}      // pump returned
	err    error              // the stream's read error, once done is closed
	once   sync.Once
	told   bool // Done was called
	gaveUp bool // pipe stopped reading before the end
}

var _ sdk.FileReader = (*pipedStream)(nil)

// pipeStream starts serving rc, which was opened with a context that
// cancel ends.
func pipeStream(rc io.ReadCloser, cancel context.CancelFunc) (*pipedStream, error) {
	r, w, err := newPipe()
	if err != nil {
		return nil, err
	}
	p := &pipedStream{rc: rc, r: r, w: w, cancel: cancel, done: make(chan struct{})}
	go p.pump()
	return p, nil
}

// pump copies the stream into the pipe. A read error ends the pipe early
// and is reported by Close, which pipe calls after it read to the end of
// the pipe, so a stream that broke off fails instead of ending short.
func (p *pipedStream) pump() {
	returned := false
	defer func() {
		if !returned {
			// The stream panicked: the process dies of it. Ending the pipe
			// and the stream here, as the panic unwinds, would let pipe
			// see a clean end (and an End without error) before the
			// process is gone; left open, the pipe ends when the process
			// does, and pipe finds the plugin lost.
			return
		}
		p.w.Close()
		close(p.done)
	}()
	// A stream with WriteTo (a ranged download) writes its own buffers
	// into the pipe; others are read through buf.
	w := &pipeWriter{f: p.w}
	if _, err := io.CopyBuffer(w, p.rc, make([]byte, wire.MaxData)); err != nil && w.err == nil {
		p.err = err // reading failed; a failed write is pipe having stopped reading (Done)
	}
	returned = true
}

// pipeWriter writes to a pipe and remembers whether writing failed. It
// also hides the file's ReadFrom from io.Copy.
type pipeWriter struct {
	f   *os.File
	err error
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	if err != nil {
		w.err = err
	}
	return n, err
}

func (p *pipedStream) File() *os.File { return p.r }

// Read is not called: pipe reads the file.
func (p *pipedStream) Read(b []byte) (int, error) { return p.r.Read(b) }

// Done closes this side's read end; when pipe stopped before the end, it
// also ends the stream's context, so a pump blocked on the stream or on
// the pipe returns.
func (p *pipedStream) Done(eof bool) {
	p.told = true
	p.once.Do(func() { p.r.Close() })
	if !eof {
		p.gaveUp = true
		p.cancel()
	}
}

// Close waits for the pump, closes the stream and reports the first
// error of reading or closing it; a read that failed because pipe gave up
// (and the context was ended) is no error of the stream's.
func (p *pipedStream) Close() error {
	if !p.told {
		p.Done(false)
	}
	<-p.done // after Done(true) the pump has ended, or is about to
	err := p.rc.Close()
	if p.err != nil && !p.gaveUp {
		return p.err
	}
	return err
}

// errAborting marks a pump stopped by Abort.
var errAborting = errors.New("the object is being aborted")

// pipedObject writes an object through a pipe: pipe writes the write end,
// and pump copies the read end into the endpoint's writer. Commit and
// Abort follow sdk.FileWriter: pipe closes its end first.
type pipedObject struct {
	w    sdk.ObjectWriter
	r    *os.File
	done chan struct{} // pump returned
	once sync.Once

	mu    sync.Mutex
	err   error // a failed Write: set before the pipe is closed
	moved int64 // bytes the pump wrote, read after done is closed
}

var _ sdk.ObjectWriter = (*pipedObject)(nil)

// pipeObject returns the write end to hand to pipe; start the pump after
// it was handed over, and close this side's copy of it.
func pipeObject(w sdk.ObjectWriter) (*pipedObject, *os.File, error) {
	r, pw, err := newPipe()
	if err != nil {
		return nil, nil, err
	}
	return &pipedObject{w: w, r: r, done: make(chan struct{})}, pw, nil
}

// pump copies the pipe into the writer until pipe closes its end. A failed
// Write closes the read end, so pipe's next write fails at once (EPIPE)
// and it asks, through Abort, what went wrong.
func (o *pipedObject) pump() {
	o.copy()
	o.closeRead()
	close(o.done) // not deferred: a Write that panics must end the process, not the object
}

func (o *pipedObject) copy() {
	buf := make([]byte, wire.MaxData)
	for {
		n, err := o.r.Read(buf)
		if n > 0 {
			o.moved += int64(n)
			if _, werr := o.w.Write(buf[:n]); werr != nil {
				o.fail(werr)
				return
			}
		}
		if err == io.EOF {
			return
		}
		if err != nil {
			if !errors.Is(err, os.ErrClosed) { // closed by Abort
				o.fail(err)
			}
			return
		}
	}
}

func (o *pipedObject) closeRead() { o.once.Do(func() { o.r.Close() }) }

// detach stops the pump before pipe wrote anything, so that the writer
// can take its bytes from elsewhere (SendFile); pipe's write end stays
// open until it finishes the object. It fails when the pump had moved
// bytes already.
func (o *pipedObject) detach() error {
	o.closeRead()
	<-o.done
	if err := o.failure(); err != nil {
		return err
	}
	if o.moved > 0 {
		return fmt.Errorf("%d bytes were written through the pipe already", o.moved)
	}
	return nil
}

// fail records why the pump stopped, unless Abort stopped it.
func (o *pipedObject) fail(err error) {
	o.mu.Lock()
	if o.err == nil {
		o.err = err
	}
	o.mu.Unlock()
}

func (o *pipedObject) failure() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Write is not called: pipe writes the file.
func (o *pipedObject) Write(b []byte) (int, error) {
	return 0, errors.New("a piped object is written through its pipe")
}

// Commit waits until every byte pipe wrote is in the writer, then commits
// it. A Write that failed fails the Commit (and pipe then aborts).
func (o *pipedObject) Commit(ctx context.Context) error {
	select {
	case <-o.done:
	case <-ctx.Done():
		o.closeRead()
		<-o.done
		return ctx.Err()
	}
	if err := o.failure(); err != nil {
		return err
	}
	return o.w.Commit(ctx)
}

// Abort stops the pump (a Write blocked in the writer returns when the
// writer aborts) and aborts the writer. When a failed Write had stopped
// the pump already, that failure is the answer: it is why pipe aborts
// (pipe's write to the closed pipe failed). It is read before the writer
// aborts, whose own stop would fail the Write otherwise.
func (o *pipedObject) Abort(ctx context.Context) error {
	failed := o.failure()
	o.fail(errAborting) // a Write the abort ends is no failure
	o.closeRead()
	err := o.w.Abort(ctx)
	<-o.done
	if failed != nil {
		return failed
	}
	return err
}
