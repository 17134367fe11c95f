package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// pooled is what a pool holds: a connection (*pgx.Conn).
type pooled interface {
	comparable
	IsClosed() bool
	Close(context.Context) error
}

// pool hands out at most n connections at once (a parallel dump's readers,
// a parallel restore's loaders). Each is made on first use by dial and
// kept for the next user; one found closed (a COPY cancelled halfway
// closes it) is made again. Once retired, a connection given back is
// closed instead of kept.
type pool[C pooled] struct {
	slots chan C // the zero C: a slot not connected yet
	dial  func(context.Context) (C, error)

	mu      sync.Mutex
	opened  []C
	retired bool
}

// connPool is the pool of PostgreSQL connections the source and sink use.
type connPool = pool[*pgx.Conn]

func newPool[C pooled](n int, dial func(context.Context) (C, error)) *pool[C] {
	p := &pool[C]{slots: make(chan C, n), dial: dial}
	var none C
	for range n {
		p.slots <- none
	}
	return p
}

// get waits for a free slot and returns its connection.
func (p *pool[C]) get(ctx context.Context) (C, error) {
	var pc, none C
	select {
	case pc = <-p.slots:
	case <-ctx.Done():
		return none, ctx.Err()
	}
	if pc != none && !pc.IsClosed() {
		return pc, nil
	}
	pc, err := p.dial(ctx)
	if err != nil {
		p.slots <- none
		return none, err
	}
	p.mu.Lock()
	p.opened = append(p.opened, pc)
	p.mu.Unlock()
	return pc, nil
}

// put gives a connection from get back; once the pool is retired it is
// closed.
func (p *pool[C]) put(pc C) {
	p.mu.Lock()
	retired := p.retired
	p.mu.Unlock()
	if retired {
		var none C
		pc.Close(context.Background())
		p.slots <- none
		return
	}
	p.slots <- pc
}

// retire closes the idle connections now, and each busy one when it is
// given back: for a pool no more work is coming to (a database whose
// tables are all being read). A get after it still works: it connects.
func (p *pool[C]) retire() {
	p.mu.Lock()
	p.retired = true
	p.mu.Unlock()
	var none C
	for range len(p.slots) {
		select {
		case pc := <-p.slots:
			if pc != none {
				pc.Close(context.Background())
			}
			p.slots <- none
		default:
			return
		}
	}
}

// close closes every connection the pool made.
func (p *pool[C]) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.opened {
		pc.Close(context.Background())
	}
	p.opened = nil
}
