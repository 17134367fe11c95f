package dedup

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
)

// Copier is the stage of a run copied from one store into another: an
// engine Streamer that reads a chunk list of the source store and writes
// the list of the same chunks in the target store. A chunk the target
// holds (its index says) is named where it is; any other is read from
// the source's pack, its digest checked, and appended as it is (sealed:
// no key is needed) to a pack of the target. Only missing chunks travel.
type Copier struct {
	run    context.Context // the packer's: packs outlive each stream
	index  *Index
	packer *Packer
	from   RangeReader
	stats  Stats
	packs  packSet
}

// NewCopier returns the stage: from reads the source's packs, index and
// packer are the target's. The packs it writes live as long as run.
func NewCopier(run context.Context, from RangeReader, index *Index, packer *Packer) *Copier {
	return &Copier{run: run, index: index, packer: packer, from: from}
}

// Stats returns what the copy counted so far.
func (c *Copier) Stats() *Stats { return &c.stats }

// Packs returns the target's packs the lists written so far name.
func (c *Copier) Packs() []string { return c.packs.list() }

// Close commits the open pack of the target; see Packer.Close.
func (c *Copier) Close(ctx context.Context) ([]string, error) { return c.packer.Close(ctx) }

// Abort discards the open pack.
func (c *Copier) Abort(ctx context.Context) { c.packer.Abort(ctx) }

// Stream copies the chunks of the list src into the target and writes
// their list there to dst.
func (c *Copier) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	lr, lw := NewListReader(src), NewListWriter(dst)
	var blob []byte
	for n := 1; ; n++ {
		ref, err := lr.Next()
		if errors.Is(err, io.EOF) {
			return lw.Close()
		}
		if err != nil {
			return err
		}
		c.stats.Chunks.Add(1)
		c.stats.PlainBytes.Add(int64(ref.Plain))
		e, fresh := c.index.reserve(ref.ID)
		if fresh {
			if cap(blob) < int(ref.Size) {
				blob = make([]byte, ref.Size)
			}
			to, err := c.copyBlob(ctx, ref, blob[:ref.Size])
			if err != nil {
				err = fmt.Errorf("chunk %d of the stream (%s, in pack %s at byte %d): %w", n, ref.ID, ref.Pack, ref.Offset, err)
			}
			c.index.resolve(e, to, err)
		}
		to, err := e.wait(ctx)
		if err != nil {
			return err
		}
		if err := lw.Add(to); err != nil {
			return err
		}
		c.packs.add(to.Pack)
	}
}

// copyBlob reads ref's blob into b, checks it, and appends it to the
// target's pack.
func (c *Copier) copyBlob(ctx context.Context, ref Ref, b []byte) (Ref, error) {
	if err := c.from.ReadRange(ctx, ref.Pack, ref.Offset, b); err != nil {
		return Ref{}, err
	}
	if sha256.Sum256(b) != ref.Sum {
		return Ref{}, errors.New("its bytes do not have the SHA-256 its list records: the source's pack is damaged")
	}
	loc, err := c.packer.Add(c.run, b, ref.Sum)
	if err != nil {
		return Ref{}, err
	}
	c.stats.New.Add(1)
	c.stats.NewBytes.Add(int64(ref.Plain))
	c.stats.StoredBytes.Add(ref.Size)
	return Ref{ID: ref.ID, Plain: ref.Plain, Loc: loc}, nil
}
