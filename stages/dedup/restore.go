package dedup

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"

	"golang.org/x/sync/errgroup"
)

// RangeReader reads a byte range of a pack.
type RangeReader interface {
	// ReadRange fills p with the bytes of the pack from offset on.
	ReadRange(ctx context.Context, pack string, offset int64, p []byte) error
}

// Restore is a run's stage that turns chunk lists back into streams: an
// engine Streamer that reads a list and writes the stream, its chunks
// read, checked and opened ahead on several goroutines.
type Restore struct {
	packs  RangeReader
	format Format
	ahead  int
	// max bounds a chunk as the run's sizes do: a list that says more is
	// refused before anything is allocated for it.
	max int
	// check: read and check each blob, open none, write nothing.
	check bool
	seen  *Seen
}

// NewChecker returns a stage that checks, for each chunk list it reads,
// that every blob it names is in its pack with the SHA-256 the list
// records, without a key; it writes nothing. Blobs seen holds (checked
// by an earlier stream) are not read again.
func NewChecker(packs RangeReader, ahead, maxChunk int, seen *Seen) *Restore {
	return &Restore{packs: packs, ahead: max(ahead, 1), max: maxChunk, check: true, seen: seen}
}

// Seen is a bounded set of blobs checked already.
type Seen struct {
	mu  sync.Mutex
	m   map[Loc]bool
	max int
}

// NewSeen returns a set of at most n blobs.
func NewSeen(n int) *Seen { return &Seen{m: map[Loc]bool{}, max: n} }

func (s *Seen) has(l Loc) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[l]
}

func (s *Seen) add(l Loc) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) < s.max {
		s.m[l] = true
	}
}

// NewRestore returns the stage; ahead chunks of a stream, of at most
// maxChunk bytes, are read at once.
func NewRestore(packs RangeReader, f Format, ahead, maxChunk int) (*Restore, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	return &Restore{packs: packs, format: f, ahead: max(ahead, 1), max: maxChunk}, nil
}

// maxStored bounds a blob of a chunk of n bytes: zstd's bound, and an
// age file's header and tags.
func maxStored(n int) int64 { return int64(n) + int64(n)/255 + 1024 + int64(n)/(64<<10)*16 + 16 + 4096 }

// StreamMemory is what a stream keeps when its chunks are at most max
// bytes: a blob per reader, and the chunks read ahead, being read and
// being written.
func (r *Restore) StreamMemory(max int) int64 { return RestoreMemory(r.ahead, max) }

// RestoreMemory is what a stream of a restore reading ahead chunks of at
// most max bytes at once keeps, its list's reader included.
func RestoreMemory(ahead, max int) int64 {
	return int64(ahead)*(int64(max)+4096) + int64(2*ahead+1)*int64(max) + ListMemory
}

type slot struct {
	n     int // the chunk's place in the stream, from 1
	ref   Ref
	plain []byte // the chunk, at the start of buf
	buf   []byte
	err   error
	done  chan struct{}
}

// Stream reads the chunk list src and writes the stream it lists to dst.
func (r *Restore) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	g, gctx := errgroup.WithContext(ctx)
	order := make(chan *slot, r.ahead)
	fetch := make(chan *slot, r.ahead)
	// Chunks written are opened again into their buffers: a buffer is
	// made only when every one made is in use (at most the 2 × ahead + 1
	// RestoreMemory counts), instead of one a chunk for the collector.
	free := make(chan []byte, 2*r.ahead+1)
	g.Go(func() error {
		defer close(order)
		defer close(fetch)
		l := NewListReader(src)
		for n := 1; ; n++ {
			ref, err := l.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			if r.max > 0 && (ref.Plain > r.max || ref.Size > maxStored(r.max)) {
				return fmt.Errorf("chunk %d of the stream (%s): %d bytes (%d stored), more than the run's chunks can be (%d): the list is damaged", n, ref.ID, ref.Plain, ref.Size, r.max)
			}
			s := &slot{n: n, ref: ref, done: make(chan struct{})}
			for _, c := range []chan *slot{order, fetch} {
				select {
				case c <- s:
				case <-gctx.Done():
					return context.Cause(gctx)
				}
			}
		}
	})
	for range r.ahead {
		g.Go(func() error {
			var o *Opener
			if !r.check {
				var err error
				if o, err = r.format.NewOpener(); err != nil {
					return err
				}
			}
			var blob []byte
			for s := range fetch {
				if cap(blob) < int(s.ref.Size) {
					blob = make([]byte, s.ref.Size)
				}
				s.err = r.read(gctx, o, s, blob[:s.ref.Size], free)
				close(s.done)
			}
			return nil
		})
	}
	g.Go(func() error {
		for s := range order {
			select {
			case <-s.done:
			case <-gctx.Done():
				return context.Cause(gctx)
			}
			if s.err != nil {
				return s.err
			}
			if r.check {
				continue
			}
			if _, err := dst.Write(s.plain); err != nil {
				return err
			}
			select {
			case free <- s.buf[:0]:
			default:
			}
			s.plain, s.buf = nil, nil
		}
		return nil
	})
	return g.Wait()
}

// read reads, checks and opens the chunk of s into s.plain, a buffer
// from free if one is there.
func (r *Restore) read(ctx context.Context, o *Opener, s *slot, blob []byte, free chan []byte) error {
	where := func() string {
		return fmt.Sprintf("chunk %d of the stream (%s, in pack %s at byte %d)", s.n, s.ref.ID, s.ref.Pack, s.ref.Offset)
	}
	if r.check && r.seen.has(s.ref.Loc) {
		return nil
	}
	if err := r.packs.ReadRange(ctx, s.ref.Pack, s.ref.Offset, blob); err != nil {
		return fmt.Errorf("%s: %w", where(), err)
	}
	if sha256.Sum256(blob) != s.ref.Sum {
		return fmt.Errorf("%s: its bytes do not have the SHA-256 its list records: the pack is damaged", where())
	}
	if r.check {
		r.seen.add(s.ref.Loc)
		return nil
	}
	var buf []byte
	select {
	case buf = <-free:
	default:
	}
	if cap(buf) < s.ref.Plain {
		// The run's largest chunk (the list was checked against it), so
		// the buffer fits every chunk after this one.
		buf = make([]byte, 0, max(r.max, s.ref.Plain))
	}
	// Open takes the chunk's size from dst's capacity.
	plain, err := o.Open(buf[:0:s.ref.Plain], blob)
	if err != nil {
		return fmt.Errorf("%s: %w", where(), err)
	}
	s.plain, s.buf = plain, buf
	return nil
}
