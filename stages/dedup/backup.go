package dedup

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"

	"github.com/pipebackup/pipe/stages/compress"
)

// Backup is a run's deduplicating stage: for each stream (Stream, an
// engine Streamer) it cuts the chunks, has the new ones sealed and packed
// by workers shared by the run's streams, and writes the stream's chunk
// list.
type Backup struct {
	key     Key
	sizes   Sizes
	index   *Index
	packer  *Packer
	ahead   int
	jobs    chan *job
	workers sync.WaitGroup
	stopped sync.Once
	stats   Stats
	mu      sync.Mutex
	packs   map[string]bool // every pack the run's lists name
}

// Stats count a backup's chunks.
type Stats struct {
	Chunks, New          atomic.Int64
	PlainBytes, NewBytes atomic.Int64 // the chunks' sizes
	StoredBytes          atomic.Int64 // the new chunks' blobs
}

// BackupConfig is what a deduplicating backup needs.
type BackupConfig struct {
	Key    Key
	Sizes  Sizes
	Format Format
	Index  *Index
	Packer *Packer
	// Workers seal chunks, shared by all streams.
	Workers int
	// Ahead is how many new chunks of one stream may wait to be sealed.
	Ahead int
}

// StreamMemory is what one stream keeps: the chunker's read-ahead and
// the new chunks waiting for a worker.
func (c BackupConfig) StreamMemory() int64 {
	return int64(2*c.Sizes.Max) + int64(max(c.Ahead, 1))*int64(c.Sizes.Max)
}

// WorkerMemory is what one worker keeps: a compressed and a sealed chunk.
func (c BackupConfig) WorkerMemory() int64 { return 2 * int64(compress.Bound(c.Sizes.Max)+4096) }

// job is one chunk of a stream, from its cut until the list names it.
type job struct {
	plain   []byte
	release func()
	// e is the chunk's entry in the index, set before named is closed.
	e     *entry
	named chan struct{}
}

// NewBackup starts the workers of a backup; they stop with ctx or Close.
func NewBackup(ctx context.Context, c BackupConfig) (*Backup, error) {
	if err := c.Sizes.Check(); err != nil {
		return nil, err
	}
	if err := c.Format.Check(); err != nil {
		return nil, err
	}
	b := &Backup{key: c.Key, sizes: c.Sizes, index: c.Index, packer: c.Packer, ahead: max(c.Ahead, 1), jobs: make(chan *job), packs: map[string]bool{}}
	for range max(c.Workers, 1) {
		s, err := c.Format.NewSealer()
		if err != nil {
			b.stop()
			return nil, err
		}
		b.workers.Add(1)
		go b.work(ctx, s)
	}
	return b, nil
}

// work names chunks, looks each up in the index and seals and packs the
// new ones. It stores every chunk it is given, even of a stream that
// failed since: other streams may wait for it.
func (b *Backup) work(ctx context.Context, s *Sealer) {
	defer b.workers.Done()
	h := b.key.Hasher()
	for j := range b.jobs {
		e, fresh := b.index.reserve(h.Sum(j.plain))
		j.e = e
		close(j.named)
		if !fresh {
			j.release()
			continue
		}
		ref := Ref{ID: e.ref.ID, Plain: len(j.plain)}
		blob, err := s.Seal(j.plain)
		if err == nil {
			ref.Loc, err = b.packer.Add(ctx, blob, sha256.Sum256(blob))
		}
		j.release()
		if err == nil {
			b.stats.New.Add(1)
			b.stats.NewBytes.Add(int64(ref.Plain))
			b.stats.StoredBytes.Add(ref.Size)
		}
		b.index.resolve(e, ref, err)
	}
}

func (b *Backup) stop() {
	b.stopped.Do(func() { close(b.jobs) })
	b.workers.Wait()
}

// Packs returns the packs the lists written so far name.
func (b *Backup) Packs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.packs))
	for p := range b.packs {
		out = append(out, p)
	}
	return out
}

// Stats returns the backup's counts so far.
func (b *Backup) Stats() *Stats { return &b.stats }

// Close waits for the workers, then commits the open pack: after it,
// every list written names chunks in the store. It returns the packs the
// run wrote. Call it once no stream runs.
func (b *Backup) Close(ctx context.Context) ([]string, error) {
	b.stop()
	return b.packer.Close(ctx)
}

// Abort stops the workers and discards the open pack.
func (b *Backup) Abort(ctx context.Context) {
	b.stop()
	b.packer.Abort(ctx)
}

// Stream stores the chunks of src that the store does not hold and writes
// the list of all its chunks to dst. The stream's goroutine only cuts;
// the workers name each chunk, look it up and store the new ones, and the
// list is written in the stream's order as they finish.
func (b *Backup) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	c, err := NewChunker(b.key, b.sizes, src, make([]byte, 2*b.sizes.Max))
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	order := make(chan *job, b.ahead)
	g.Go(func() error {
		lw := NewListWriter(dst)
		last := ""
		for j := range order {
			select {
			case <-j.named:
			case <-gctx.Done():
				return context.Cause(gctx)
			}
			ref, err := j.e.wait(gctx)
			if err != nil {
				return fmt.Errorf("chunk %s: %w", j.e.ref.ID, err)
			}
			if err := lw.Add(ref); err != nil {
				return err
			}
			if ref.Pack != last {
				last = ref.Pack
				b.mu.Lock()
				b.packs[last] = true
				b.mu.Unlock()
			}
		}
		return lw.Close()
	})
	free := make(chan []byte, b.ahead)
	made := 0
	g.Go(func() error {
		defer close(order)
		for {
			plain, err := c.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			b.stats.Chunks.Add(1)
			b.stats.PlainBytes.Add(int64(len(plain)))
			var buf []byte
			if made < b.ahead {
				buf, made = make([]byte, b.sizes.Max), made+1
			} else {
				select {
				case buf = <-free:
				case <-gctx.Done():
					return context.Cause(gctx)
				}
			}
			j := &job{plain: append(buf[:0], plain...), release: func() { free <- buf }, named: make(chan struct{})}
			// In order first: the job is in the list's queue before any
			// worker can take it.
			for _, send := range []func() bool{
				func() bool {
					select {
					case order <- j:
						return true
					case <-gctx.Done():
						return false
					}
				},
				func() bool {
					select {
					case b.jobs <- j:
						return true
					case <-gctx.Done():
						return false
					}
				},
			} {
				if !send() {
					return context.Cause(gctx)
				}
			}
		}
	})
	return g.Wait()
}
