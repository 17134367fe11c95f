package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
)

// pool hands out at most n connections at once (a parallel dump's readers,
// a parallel restore's loaders). Each is made on first use by dial and
// kept for the next user; one found closed (a COPY cancelled halfway
// closes it) is made again.
type pool struct {
	slots chan *pgx.Conn // nil: a slot not connected yet
	dial  func(context.Context) (*pgx.Conn, error)

	mu     sync.Mutex
	opened []*pgx.Conn
}

func newPool(n int, dial func(context.Context) (*pgx.Conn, error)) *pool {
	p := &pool{slots: make(chan *pgx.Conn, n), dial: dial}
	for range n {
		p.slots <- nil
	}
	return p
}

// get waits for a free slot and returns its connection.
func (p *pool) get(ctx context.Context) (*pgx.Conn, error) {
	var pc *pgx.Conn
	select {
	case pc = <-p.slots:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if pc != nil && !pc.IsClosed() {
		return pc, nil
	}
	pc, err := p.dial(ctx)
	if err != nil {
		p.slots <- nil
		return nil, err
	}
	p.mu.Lock()
	p.opened = append(p.opened, pc)
	p.mu.Unlock()
	return pc, nil
}

// put gives a connection from get back.
func (p *pool) put(pc *pgx.Conn) { p.slots <- pc }

// close closes every connection the pool made.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pc := range p.opened {
		pc.Close(context.Background())
	}
	p.opened = nil
}
