package engine

import (
	"context"
	"sync/atomic"

	"github.com/pipebackup/pipe/plugins/sdk/hugepage"
)

// pool is a fixed set of equally sized buffers. Buffers are allocated on
// first use, so a small run never allocates the whole budget, and are reused
// after that. get blocks while all buffers are in use.
type pool struct {
	name  string
	size  int
	free  chan []byte
	inUse atomic.Int64
	peak  atomic.Int64
}

func newPool(name string, n, size int) *pool {
	p := &pool{name: name, size: size, free: make(chan []byte, n)}
	for i := 0; i < n; i++ {
		p.free <- nil
	}
	return p
}

// get returns a buffer of len 0 and cap p.size.
func (p *pool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.free:
		return p.took(b), nil
	default:
	}
	select {
	case b := <-p.free:
		return p.took(b), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

func (p *pool) took(b []byte) []byte {
	if b == nil {
		b = hugepage.Alloc(p.size)
	}
	n := p.inUse.Add(1)
	for {
		pk := p.peak.Load()
		if n <= pk || p.peak.CompareAndSwap(pk, n) {
			break
		}
	}
	return b[:0]
}

func (p *pool) put(b []byte) {
	p.inUse.Add(-1)
	select {
	case p.free <- b[:cap(b)]:
	default:
		panic("engine: buffer returned to pool " + p.name + " twice")
	}
}

// chunk is a piece of one stream held in a pooled buffer.
type chunk struct {
	buf  []byte // the pooled buffer; the payload is buf[:n]
	n    int
	seq  int64
	pool *pool
	refs atomic.Int32
	err  error // a Mapper's failure for this unit
}

func newChunk(p *pool, buf []byte, seq int64) *chunk {
	c := &chunk{buf: buf[:cap(buf)], seq: seq, pool: p}
	c.refs.Store(1)
	return c
}

func (c *chunk) data() []byte { return c.buf[:c.n] }

// release gives the buffer back once every holder released it.
func (c *chunk) release() {
	if c.refs.Add(-1) == 0 {
		c.pool.put(c.buf)
	}
}

// send delivers c on ch unless ctx ends first, in which case c is released.
func send(ctx context.Context, ch chan<- *chunk, c *chunk) error {
	select {
	case ch <- c:
		return nil
	default:
	}
	select {
	case ch <- c:
		return nil
	case <-ctx.Done():
		c.release()
		return context.Cause(ctx)
	}
}

// drain releases every chunk left in ch; ch must be closed by its producer.
func drain(ch <-chan *chunk) {
	for c := range ch {
		c.release()
	}
}
