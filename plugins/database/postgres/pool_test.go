package postgres

import (
	"context"
	"testing"
)

// fakeConn stands for a connection: it knows whether it was closed.
type fakeConn struct {
	id     int
	closed bool
}

func (c *fakeConn) IsClosed() bool              { return c.closed }
func (c *fakeConn) Close(context.Context) error { c.closed = true; return nil }

// A pool keeps connections for the next user until it is retired; then
// it closes the idle ones at once and each busy one when it comes back,
// and a later get still gets a connection.
func TestPoolRetire(t *testing.T) {
	ctx := context.Background()
	dialed := 0
	p := newPool(2, func(context.Context) (*fakeConn, error) {
		dialed++
		return &fakeConn{id: dialed}, nil
	})
	a, _ := p.get(ctx)
	b, _ := p.get(ctx)
	p.put(a)
	if again, _ := p.get(ctx); again != a || dialed != 2 {
		t.Fatalf("a connection given back was not kept: got %d, %d dialed", again.id, dialed)
	}
	p.put(a)
	p.retire()
	if !a.closed || b.closed {
		t.Errorf("after retire: idle closed %v (want true), busy closed %v (want false)", a.closed, b.closed)
	}
	p.put(b)
	if !b.closed {
		t.Error("a busy connection given back after retire was kept")
	}
	c, err := p.get(ctx)
	if err != nil || c.closed || dialed != 3 {
		t.Errorf("a get after retire: %v, closed %v, %d dialed (want a new one)", err, c.closed, dialed)
	}
	p.put(c)
	p.close()
}
