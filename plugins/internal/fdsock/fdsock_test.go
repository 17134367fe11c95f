package fdsock

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files cross in both directions under their tokens; one that arrives
// after its Take gave up is closed, not kept.
func TestPassesFilesBothWays(t *testing.T) {
	a, child, err := Pair()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := open(child)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	for _, dir := range []struct{ from, to *Conn }{{a, b}, {b, a}} {
		if err := dir.from.Send(7, f); err != nil {
			t.Fatal(err)
		}
		got, err := dir.to.Take(ctx, 7)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(io.NewSectionReader(got, 0, 100))
		got.Close()
		if string(b) != "hello" {
			t.Fatalf("the file handed over reads %q", b)
		}
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := b.Take(cctx, 8); err == nil {
		t.Fatal("Take of a file never sent returned")
	}
	if err := a.Send(8, f); err != nil {
		t.Fatal(err)
	}
	// Messages arrive in order: once 9 is taken, 8 was handled.
	if err := a.Send(9, f); err != nil {
		t.Fatal(err)
	}
	nine, err := b.Take(ctx, 9)
	if err != nil {
		t.Fatal(err)
	}
	nine.Close()
	b.mu.Lock()
	kept, abandoned := len(b.files), len(b.abandoned)
	b.mu.Unlock()
	if kept != 0 || abandoned != 0 {
		t.Fatalf("a file sent after its Take gave up: %d kept, %d still expected", kept, abandoned)
	}
}
