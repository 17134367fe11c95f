package direct

import (
	"bytes"
	"context"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
)

// fileStream is a FileReader over an OS file, as the fs source's streams
// are; it records what Done was told.
type fileStream struct {
	f    *os.File
	done atomic.Int32 // 1: true, 2: false
}

func (s *fileStream) Read(p []byte) (int, error) { return s.f.Read(p) }
func (s *fileStream) Close() error               { return s.f.Close() }
func (s *fileStream) File() *os.File             { return s.f }
func (s *fileStream) Done(eof bool) {
	if eof {
		s.done.Store(1)
	} else {
		s.done.Store(2)
	}
}

// A stream of a file is copied into the target in order, from where it
// starts in its file, with progress, and Done tells it was read to the
// end (without Done, a command's stream would count as given up).
func TestFillFromFile(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 700_000) // 11.2 MB: several pieces
	in := filepath.Join(dir, "in")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, skip := range []int64{0, 5} {
		src, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		src.Seek(skip, io.SeekStart)
		out, err := os.Create(filepath.Join(dir, "out"))
		if err != nil {
			t.Fatal(err)
		}
		s := &fileStream{f: src}
		var progress, prefix atomic.Int64
		n, err := FillFrom(context.Background(), s, out, func(k int64) { progress.Add(k) }, func(p int64) { prefix.Store(p) })
		out.Close()
		want := data[skip:]
		got, _ := os.ReadFile(out.Name())
		if err != nil || n != int64(len(want)) || progress.Load() != n || prefix.Load() != n || !bytes.Equal(got, want) || s.done.Load() != 1 {
			t.Fatalf("from byte %d: %d bytes (progress %d, prefix %d, file %d, equal %v, done %d): %v", skip, n, progress.Load(), prefix.Load(), len(got), bytes.Equal(got, want), s.done.Load(), err)
		}
	}
}

// A fill starts the writeback of each 8 MiB block once a write reaches its
// end, and of nothing else.
func TestCompletedBlocks(t *testing.T) {
	const b, k = writebackBlock, fillPiece
	for _, c := range []struct{ off, n, start, length int64 }{
		{0, k, 0, 0},                 // inside the first block
		{b - k, k, 0, b},             // the first block's last piece
		{b - k, 2 * k, 0, b},         // across the boundary: only the full block
		{b, k, 0, 0},                 // the second block's first piece
		{3*b - k, k, 2 * b, b},       // the third block's end
		{b - 10, 2*b + 20, 0, 3 * b}, // a write spanning several blocks
		{5 * b, 0, 0, 0},             // nothing written
	} {
		start, length := completedBlocks(c.off, c.n)
		if start != c.start || length != c.length {
			t.Errorf("a write of %d at %d: writeback %d+%d, want %d+%d", c.n, c.off, start, length, c.start, c.length)
		}
	}
}

// The prefix told is how far the spans written reach from byte 0 without
// a gap, whatever order they land in: it only grows, never passes a gap,
// and ends at the file's size.
func TestWrittenPrefix(t *testing.T) {
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		// Ranges of 10 pieces each, written in order within a range, the
		// ranges interleaved at random, some pieces written twice (a range
		// resumed).
		const ranges, pieces, piece = 6, 10, 7
		next := make([]int, ranges)
		have := make([]bool, ranges*pieces)
		var told []int64
		w := &written{tell: func(p int64) { told = append(told, p) }}
		for left := ranges * pieces; left > 0; {
			r := rng.IntN(ranges)
			if next[r] == pieces {
				continue
			}
			k := r*pieces + next[r]
			if next[r] > 0 && rng.IntN(4) == 0 {
				w.add(int64(k-1)*piece, piece) // again
			}
			w.add(int64(k)*piece, piece)
			have[k] = true
			next[r]++
			left--
			want := 0
			for want < len(have) && have[want] {
				want++
			}
			last := int64(0)
			if len(told) > 0 {
				last = told[len(told)-1]
			}
			if last != int64(want)*piece {
				t.Fatalf("seed %d: told %d, want %d", seed, last, want*piece)
			}
		}
		for i := 1; i < len(told); i++ {
			if told[i] <= told[i-1] {
				t.Fatalf("seed %d: told %v: not growing", seed, told)
			}
		}
		if len(w.spans) != 1 {
			t.Fatalf("seed %d: spans %v", seed, w.spans)
		}
	}
}
