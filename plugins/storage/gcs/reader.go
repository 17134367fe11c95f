package gcs

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChanged is a read whose object changed (or vanished) under it.
var errChanged = errors.New("the object changed while it was read")

// rangeOpener opens n bytes of an object at off.
type rangeOpener func(ctx context.Context, off, n int64) (io.ReadCloser, error)

// rangeReader reads an object of a known size as parts of partSize bytes,
// up to conc of them at once, each into its own buffer, and hands the
// bytes on in order. It holds at most conc buffers; a part whose read
// fails is read again, up to retries times. At the end it compares the
// CRC32C of what it handed on with the object's.
type rangeReader struct {
	ctx     context.Context
	cancel  context.CancelFunc
	open    rangeOpener
	size    int64
	part    int64
	retries int
	pause   func(attempt int) time.Duration
	wantCRC uint32
	checked bool // whether wantCRC is known
	explain func(op string, err error) error

	queue    chan *part  // parts in order, as they are started
	free     chan []byte // buffers not in use (nil: not allocated yet)
	produced chan struct{}
	wg       sync.WaitGroup

	cur      *part
	off      int
	consumed int64 // parts handed on completely
	total    int64 // parts in all
	crc      uint32
	err      error
	closed   bool
}

type part struct {
	off, n int64
	buf    []byte
	done   chan struct{}
	err    error
}

type rangeOptions struct {
	size, part int64
	conc       int
	retries    int
	crc        uint32
	checkCRC   bool
	pause      func(attempt int) time.Duration
	explain    func(op string, err error) error
}

// rangeError is a part that could not be read.
type rangeError struct {
	off, n   int64
	attempts int
	err      error
}

func (e *rangeError) Error() string {
	return fmt.Sprintf("bytes %d-%d, %d attempts: %v", e.off, e.off+e.n-1, e.attempts, e.err)
}
func (e *rangeError) Unwrap() error { return e.err }

func newRangeReader(ctx context.Context, open rangeOpener, o rangeOptions) *rangeReader {
	ctx, cancel := context.WithCancel(ctx)
	if o.part <= 0 {
		o.part = defaultPartSize
	}
	conc := max(o.conc, 1)
	total := (o.size + o.part - 1) / o.part
	conc = int(min(int64(conc), max(total, 1)))
	r := &rangeReader{
		ctx: ctx, cancel: cancel, open: open, size: o.size, part: o.part, retries: o.retries,
		pause: o.pause, wantCRC: o.crc, checked: o.checkCRC, explain: o.explain,
		queue: make(chan *part, conc), free: make(chan []byte, conc), produced: make(chan struct{}),
		total: total,
	}
	if r.pause == nil {
		r.pause = pauseFor
	}
	if r.explain == nil {
		r.explain = func(op string, err error) error { return fmt.Errorf("%s: %w", op, err) }
	}
	for i := 0; i < conc; i++ {
		r.free <- nil
	}
	go r.produce()
	return r
}

// pauseFor is the backoff before retry attempt (1, 2, …): 0.25 s, doubling
// up to 8 s.
func pauseFor(attempt int) time.Duration {
	d := 250 * time.Millisecond << min(attempt-1, 5)
	return min(d, 8*time.Second)
}

// produce starts the parts in order, each once a buffer is free.
func (r *rangeReader) produce() {
	defer close(r.produced)
	defer close(r.queue)
	for off := int64(0); off < r.size; off += r.part {
		var buf []byte
		select {
		case buf = <-r.free:
		case <-r.ctx.Done():
			return
		}
		n := min(r.part, r.size-off)
		if int64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		p := &part{off: off, n: n, buf: buf[:n], done: make(chan struct{})}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			p.err = r.fetch(p)
			close(p.done)
		}()
		r.queue <- p // never blocks: there are at most conc parts
	}
}

// fetch reads one part, again on failure.
func (r *rangeReader) fetch(p *part) error {
	var err error
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			t := time.NewTimer(r.pause(attempt))
			select {
			case <-r.ctx.Done():
				t.Stop()
				return r.ctx.Err()
			case <-t.C:
			}
		}
		err = r.readPart(p)
		if err == nil || r.ctx.Err() != nil {
			break
		}
		if !retriable(err) || attempt >= r.retries {
			return &rangeError{off: p.off, n: p.n, attempts: attempt + 1, err: err}
		}
	}
	if err != nil && r.ctx.Err() != nil {
		return r.ctx.Err()
	}
	return err
}

func (r *rangeReader) readPart(p *part) error {
	rc, err := r.open(r.ctx, p.off, p.n)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, p.buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	return nil
}

// Read hands on the bytes of the parts in order.
func (r *rangeReader) Read(b []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if err := r.ctx.Err(); err != nil {
		return 0, r.fail(err)
	}
	for r.cur == nil || r.off == len(r.cur.buf) {
		if r.cur != nil {
			r.free <- r.cur.buf
			r.cur = nil
			r.consumed++
		}
		if r.consumed == r.total {
			if r.checked && r.crc != r.wantCRC {
				return 0, r.fail(fmt.Errorf("the bytes read have CRC32C %08x, the object's is %08x: %w", r.crc, r.wantCRC, errChanged))
			}
			r.err = io.EOF
			return 0, io.EOF
		}
		var p *part
		select {
		case p = <-r.queue:
		case <-r.ctx.Done():
			return 0, r.fail(r.ctx.Err())
		}
		if p == nil { // the producer stopped: cancelled
			return 0, r.fail(context.Canceled)
		}
		select {
		case <-p.done:
		case <-r.ctx.Done():
			return 0, r.fail(r.ctx.Err())
		}
		if p.err != nil {
			return 0, r.fail(p.err)
		}
		r.cur, r.off = p, 0
	}
	n := copy(b, r.cur.buf[r.off:])
	r.off += n
	r.crc = crc32.Update(r.crc, castagnoli, b[:n])
	return n, nil
}

func (r *rangeReader) fail(err error) error {
	op := "reading"
	var re *rangeError
	if errors.As(err, &re) {
		op = fmt.Sprintf("reading bytes %d-%d (%d attempts) of", re.off, re.off+re.n-1, re.attempts)
		err = re.err
	}
	r.err = r.explain(op, err)
	r.cancel()
	return r.err
}

// Close stops every read in flight and waits for them.
func (r *rangeReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.cancel()
	<-r.produced
	r.wg.Wait()
	return nil
}
