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
	packs   packSet // every pack the run's lists name
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

// StreamMemory is what one stream keeps: the chunker's buffer, the new
// chunks being stored and its list's writer.
func (c BackupConfig) StreamMemory() int64 {
	return ChunkerMemory(c.Sizes) + int64(max(c.Ahead, 1))*int64(c.Sizes.Max) + ListMemory
}

// WorkerMemory is what one worker keeps: a compressed and a sealed chunk.
func (c BackupConfig) WorkerMemory() int64 { return 2 * int64(compress.Bound(c.Sizes.Max)+4096) }

// job is one chunk of a stream, from its cut until the list names it.
type job struct {
	// src is the chunk in the chunker's buffer, readable until the job
	// calls done.
	src  []byte
	done func()
	pool *bufPool
	// id and e are the chunk's id and entry in the index, set before
	// named is closed.
	id    ID
	e     *entry
	named chan struct{}
}

// NewBackup starts the workers of a backup; they stop with Close or
// Abort, and their packs live as long as ctx.
func NewBackup(ctx context.Context, c BackupConfig) (*Backup, error) {
	if err := c.Sizes.Check(); err != nil {
		return nil, err
	}
	if err := c.Format.Check(); err != nil {
		return nil, err
	}
	b := &Backup{key: c.Key, sizes: c.Sizes, index: c.Index, packer: c.Packer, ahead: max(c.Ahead, 1), jobs: make(chan *job)}
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
		j.id = h.Sum(j.src)
		e, fresh := b.index.reserve(j.id)
		j.e = e
		close(j.named)
		if !fresh {
			j.done()
			continue
		}
		plain := append(j.pool.get(), j.src...)
		j.done()
		ref := Ref{ID: e.ref.ID, Plain: len(plain)}
		blob, err := s.Seal(plain)
		if err == nil {
			ref.Loc, err = b.packer.Add(ctx, blob, sha256.Sum256(blob))
		}
		j.pool.put(plain)
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
func (b *Backup) Packs() []string { return b.packs.list() }

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
// the workers name each chunk where it was cut, in the chunker's buffer,
// look it up, and copy out and store the new ones; the chunker refills
// its slabs once they are done with what they hold. The list is written
// in the stream's order as they finish.
func (b *Backup) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	c, err := NewChunker(b.key, b.sizes, src)
	if err != nil {
		return err
	}
	pool := &bufPool{ch: make(chan []byte, b.ahead), max: int32(b.ahead), size: b.sizes.Max}
	g, gctx := errgroup.WithContext(ctx)
	order := make(chan *job, 2*b.ahead)
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
				return fmt.Errorf("chunk %s: %w", j.id, err)
			}
			if err := lw.Add(ref); err != nil {
				return err
			}
			if ref.Pack != last {
				last = ref.Pack
				b.packs.add(last)
			}
		}
		return lw.Close()
	})
	g.Go(func() error {
		defer close(order)
		defer c.Close() // no read of src after Stream, and the slabs outlive every read of them
		for {
			chunk, done, err := c.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			b.stats.Chunks.Add(1)
			b.stats.PlainBytes.Add(int64(len(chunk)))
			j := &job{src: chunk, done: done, pool: pool, named: make(chan struct{})}
			// In order first: the job is in the list's queue before any
			// worker can take it.
			select {
			case order <- j:
			case <-gctx.Done():
				done()
				return context.Cause(gctx)
			}
			select {
			case b.jobs <- j:
			case <-gctx.Done():
				done()
				return context.Cause(gctx)
			}
		}
	})
	return g.Wait()
}

// bufPool is a stream's buffers for the new chunks being stored, made as
// needed up to max.
type bufPool struct {
	ch   chan []byte
	made atomic.Int32
	max  int32
	size int
}

// get returns a buffer, waiting for one when max are in use: those are
// held by workers storing chunks, which give them back.
func (p *bufPool) get() []byte {
	select {
	case b := <-p.ch:
		return b
	default:
	}
	if p.made.Add(1) <= p.max {
		return make([]byte, 0, p.size)
	}
	p.made.Add(-1)
	return <-p.ch
}

func (p *bufPool) put(b []byte) { p.ch <- b[:0] }
