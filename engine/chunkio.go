package engine

import (
	"context"
	"io"
	"time"
)

// chunkReader presents the chunks arriving on a channel as an io.Reader,
// releasing each chunk once it has been read.
type chunkReader struct {
	ctx   context.Context
	in    <-chan *chunk
	cur   *chunk
	off   int
	meter *Meter
	eof   bool
}

func (r *chunkReader) next() bool {
	if r.cur != nil {
		r.cur.release()
		r.cur = nil
	}
	if r.eof {
		return false
	}
	t := time.Now()
	select {
	case c, ok := <-r.in:
		r.meter.addWaitIn(t)
		if !ok {
			r.eof = true
			return false
		}
		r.cur, r.off = c, 0
		r.meter.in.Add(int64(c.n))
		r.meter.chunks.Add(1)
		return true
	case <-r.ctx.Done():
		r.meter.addWaitIn(t)
		r.eof = true
		return false
	}
}

func (r *chunkReader) Read(p []byte) (int, error) {
	for r.cur == nil || r.off == r.cur.n {
		if !r.next() {
			if err := context.Cause(r.ctx); err != nil {
				return 0, err
			}
			return 0, io.EOF
		}
	}
	n := copy(p, r.cur.buf[r.off:r.cur.n])
	r.off += n
	return n, nil
}

// WriteTo hands each chunk's bytes to w without an extra copy.
func (r *chunkReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if r.cur != nil && r.off < r.cur.n {
			n, err := w.Write(r.cur.buf[r.off:r.cur.n])
			r.off += n
			total += int64(n)
			if err != nil {
				return total, err
			}
			continue
		}
		if !r.next() {
			return total, context.Cause(r.ctx)
		}
	}
}

// close counts the bytes left unread, and releases everything.
func (r *chunkReader) close() (trailing int64) {
	for {
		if r.cur != nil {
			trailing += int64(r.cur.n - r.off)
			r.off = r.cur.n
		}
		if !r.next() {
			return trailing
		}
	}
}

// abandon releases the chunk being read; chunks still in the channel are
// released by whoever drains it. A failed stage calls it instead of close,
// so a failure does not read the rest of the stream first.
func (r *chunkReader) abandon() {
	if r.cur != nil {
		r.cur.release()
		r.cur = nil
	}
	r.eof = true
}

// chunkWriter packs the bytes written to it into pooled chunks of up to
// size bytes and hands each full chunk to emit.
type chunkWriter struct {
	ctx     context.Context
	pool    *pool
	size    int
	cur     *chunk
	seq     int64
	emitted int64
	emit    func(*chunk) error
	meter   *Meter
}

func (w *chunkWriter) grab() error {
	t := time.Now()
	buf, err := w.pool.get(w.ctx)
	w.meter.addBlocked(t)
	if err != nil {
		return err
	}
	w.cur = newChunk(w.pool, buf, w.seq)
	w.seq++
	return nil
}

func (w *chunkWriter) flush() error {
	c := w.cur
	w.cur = nil
	w.emitted++
	w.meter.out.Add(int64(c.n))
	t := time.Now()
	err := w.emit(c)
	w.meter.addBlocked(t)
	return err
}

func (w *chunkWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if w.cur == nil {
			if err := w.grab(); err != nil {
				return written, err
			}
		}
		n := copy(w.cur.buf[w.cur.n:w.size], p)
		w.cur.n += n
		p = p[n:]
		written += n
		if w.cur.n == w.size {
			if err := w.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// ReadFrom reads straight into pooled buffers without an extra copy.
func (w *chunkWriter) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		if w.cur == nil {
			if err := w.grab(); err != nil {
				return total, err
			}
		}
		n, err := r.Read(w.cur.buf[w.cur.n:w.size])
		w.cur.n += n
		total += int64(n)
		if w.cur.n == w.size {
			if ferr := w.flush(); ferr != nil {
				return total, ferr
			}
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// close emits the last partial chunk; a stream that produced nothing
// still emits one empty chunk, so every stream has at least one.
func (w *chunkWriter) close() error {
	if w.cur == nil && w.emitted == 0 {
		if err := w.grab(); err != nil {
			return err
		}
	}
	if w.cur != nil && (w.cur.n > 0 || w.emitted == 0) {
		return w.flush()
	}
	w.discard()
	return nil
}

// discard releases a partial chunk after a failure.
func (w *chunkWriter) discard() {
	if w.cur != nil {
		w.cur.release()
		w.cur = nil
	}
}
