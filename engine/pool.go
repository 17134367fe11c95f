package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/pipebackup/pipe/plugins/sdk/hugepage"
)

// pool is a fixed set of equally sized buffers. Buffers are allocated on
// first use and reused after that, the most recently returned first, so a
// run allocates (and the kernel backs with memory) only as many buffers as
// it ever held at once, not the whole budget; a reused buffer is also the
// one likeliest still in the CPU's caches. get blocks while all buffers are
// in use.
type pool struct {
	name  string
	size  int
	slots chan struct{} // a token per buffer not in use, allocated or not
	inUse atomic.Int64
	peak  atomic.Int64

	mu        sync.Mutex
	free      [][]byte // allocated buffers not in use, the last returned last
	allocated int
}

func newPool(name string, n, size int) *pool {
	p := &pool{name: name, size: size, slots: make(chan struct{}, n)}
	for i := 0; i < n; i++ {
		p.slots <- struct{}{}
	}
	return p
}

// buffers is how many buffers the pool has, allocated or not.
func (p *pool) buffers() int { return cap(p.slots) }

// get returns a buffer of len 0 and cap p.size.
func (p *pool) get(ctx context.Context) ([]byte, error) {
	select {
	case <-p.slots:
		return p.took(), nil
	default:
	}
	select {
	case <-p.slots:
		return p.took(), nil
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
}

// took hands out a free buffer, allocating one if none is: the caller holds
// a slot. The count of buffers in use changes with the free stack, under
// one lock, so a buffer being returned is never mistaken for a missing one.
func (p *pool) took() []byte {
	p.mu.Lock()
	var b []byte
	if n := len(p.free); n > 0 {
		b, p.free[n-1] = p.free[n-1], nil
		p.free = p.free[:n-1]
	} else {
		p.allocated++
	}
	n := p.inUse.Add(1)
	if n > p.peak.Load() {
		p.peak.Store(n)
	}
	p.mu.Unlock()
	if b == nil {
		b = hugepage.Alloc(p.size)
	}
	return b[:0]
}

func (p *pool) put(b []byte) {
	b = b[:cap(b)]
	p.mu.Lock()
	for _, f := range p.free {
		if unsafe.SliceData(f) == unsafe.SliceData(b) {
			p.mu.Unlock()
			panic("engine: buffer returned to pool " + p.name + " twice")
		}
	}
	p.free = append(p.free, b)
	p.inUse.Add(-1)
	p.mu.Unlock()
	select {
	case p.slots <- struct{}{}:
	default:
		panic("engine: more buffers returned to pool " + p.name + " than it has")
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
