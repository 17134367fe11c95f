package engine

import (
	"context"
	"testing"
	"time"
)

// A pool allocates only as many buffers as were ever in use at once: a
// long run that holds three of twelve at a time touches three, not the
// whole budget the plan counts.
func TestPoolAllocatesWhatIsHeld(t *testing.T) {
	ctx := context.Background()
	p := newPool("test", 12, 4096)
	var held [][]byte
	for i := 0; i < 1000; i++ {
		b, err := p.get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, b)
		if len(held) == 3 {
			p.put(held[0])
			held = held[1:]
		}
	}
	if p.allocated != 3 {
		t.Fatalf("%d buffers allocated for at most 3 held at once", p.allocated)
	}
	if got := p.peak.Load(); got != 3 {
		t.Fatalf("peak %d, want 3", got)
	}
}

// The buffer handed out is the one returned last (warm in the caches).
func TestPoolReusesTheLastReturned(t *testing.T) {
	ctx := context.Background()
	p := newPool("test", 4, 64)
	a, _ := p.get(ctx)
	b, _ := p.get(ctx)
	p.put(a)
	p.put(b)
	c, _ := p.get(ctx)
	if &c[:1][0] != &b[:1][0] {
		t.Fatal("get did not hand out the buffer returned last")
	}
}

// get blocks while every buffer is in use, until one comes back or the
// context ends.
func TestPoolBlocksWhenAllInUse(t *testing.T) {
	p := newPool("test", 2, 64)
	a, _ := p.get(context.Background())
	p.get(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := p.get(ctx)
		got <- err
	}()
	cancel()
	if err := <-got; err == nil {
		t.Fatal("get returned a third buffer of two")
	}
	// A get that waits gets the buffer put back.
	waiting := make(chan []byte, 1)
	go func() {
		b, _ := p.get(context.Background())
		waiting <- b
	}()
	select {
	case <-waiting:
		t.Fatal("get returned a third buffer of two")
	case <-time.After(50 * time.Millisecond):
	}
	p.put(a)
	if b := <-waiting; &b[:1][0] != &a[:1][0] {
		t.Fatal("the waiting get did not get the buffer put back")
	}
	if p.allocated != 2 {
		t.Fatalf("%d allocated, want 2", p.allocated)
	}
}

// A buffer returned twice is caught, also while other buffers are out.
func TestPoolDoublePutPanics(t *testing.T) {
	p := newPool("test", 2, 64)
	b, _ := p.get(context.Background())
	p.get(context.Background())
	p.put(b)
	defer func() {
		if recover() == nil {
			t.Fatal("a buffer returned twice went unnoticed")
		}
	}()
	p.put(b)
}
