package dedup

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sync"
)

// Sizes bound the chunks a stream is cut into.
type Sizes struct {
	Min, Avg, Max int
}

// DefaultSizes are 256 KiB, 1 MiB and 4 MiB: large enough that a run of a
// terabyte has a million chunks (an index of ~200 MiB), small enough that
// a change costs about a mebibyte around it.
var DefaultSizes = Sizes{Min: 256 << 10, Avg: 1 << 20, Max: 4 << 20}

// Check says what is wrong with the sizes.
func (s Sizes) Check() error {
	switch {
	case s.Avg&(s.Avg-1) != 0 || s.Avg < 4<<10 || s.Avg > 64<<20:
		return fmt.Errorf("the average chunk size (%d) must be a power of two from 4 KiB to 64 MiB", s.Avg)
	case s.Min < 1<<10 || s.Min >= s.Avg:
		return fmt.Errorf("the smallest chunk size (%d) must be at least 1 KiB and below the average (%d)", s.Min, s.Avg)
	case s.Max <= s.Avg || s.Max > 256<<20:
		return fmt.Errorf("the largest chunk size (%d) must be above the average (%d) and at most 256 MiB", s.Max, s.Avg)
	}
	return nil
}

// String is how manifests and plans record the sizes.
func (s Sizes) String() string { return fmt.Sprintf("fastcdc %d/%d/%d", s.Min, s.Avg, s.Max) }

// ParseSizes reads sizes as String wrote them.
func ParseSizes(text string) (Sizes, error) {
	var s Sizes
	if _, err := fmt.Sscanf(text, "fastcdc %d/%d/%d", &s.Min, &s.Avg, &s.Max); err != nil {
		return Sizes{}, fmt.Errorf("chunker %q is not fastcdc MIN/AVG/MAX", text)
	}
	if err := s.Check(); err != nil {
		return Sizes{}, fmt.Errorf("chunker %q: %w", text, err)
	}
	return s, nil
}

// cutter finds chunk boundaries: FastCDC (Xia et al., 2016) with
// normalized chunking of level 1, its gear table drawn from the key.
// Bytes before a chunk's smallest size are skipped; from there the gear
// hash rolls over each byte, and a boundary follows the first byte at
// which it has every bit of a mask clear: a harder mask (a bit more than
// the average's) before the average size, an easier one (a bit fewer)
// after, and the largest size cuts regardless. Level 1, not the paper's
// 2: with 2, an insertion and a deletion changed up to 13 chunks for some
// keys (the cuts of the old and the new content took several chunks to
// fall on the same boundaries again), with 1 at most 4, and 2 (one per
// edit) for 195 keys of 200.
type cutter struct {
	gear         [256]uint64
	maskS, maskL uint64
	Sizes
}

func newCutter(k Key, s Sizes) *cutter {
	c := &cutter{Sizes: s}
	var block [sha256.Size]byte
	mac := hmac.New(sha256.New, k.cut)
	for i := 0; i < len(c.gear); i += 4 {
		mac.Reset()
		mac.Write([]byte{byte(i), byte(i >> 8)})
		mac.Sum(block[:0])
		for j := range 4 {
			c.gear[i+j] = binary.LittleEndian.Uint64(block[8*j:])
		}
	}
	b := bits.TrailingZeros(uint(s.Avg))
	c.maskS, c.maskL = spacedMask(b+1), spacedMask(b-1)
	// No boundary inside a run of one byte (padding, a page's free
	// space): k bytes into a run of b, the hash's k lowest bits are those
	// of -gear[b] (the sum of gear[b]<<i for i < k), whatever came before.
	// With the bit of -gear[b] at each mask's lowest one set, no hash
	// further into the run has a mask's bits all clear. Left to the key,
	// some keys let boundaries into the 84 spaces of every pgbench row: one
	// of six tried cut a 933 MiB dump into 642 chunks where the others cut
	// 345-419, and stored it 13% larger (each chunk compresses on its
	// own); with this, six keys cut 329-364.
	force := uint64(1)<<bits.TrailingZeros64(c.maskS) | uint64(1)<<bits.TrailingZeros64(c.maskL)
	for i, g := range c.gear {
		c.gear[i] = -(-g | force)
	}
	return c
}

// spacedMask is a mask of ones bits spread over the 64: the gear hash's
// higher bits depend on more of the bytes before.
func spacedMask(ones int) uint64 {
	var m uint64
	step := 64 / ones
	for i := range ones {
		m |= 1 << (63 - i*step)
	}
	return m
}

// cut returns the length of the chunk data starts with: all of data when
// it is the stream's last (final) or reaches no boundary before Max.
func (c *cutter) cut(data []byte) int {
	n := len(data)
	if n <= c.Min {
		return n
	}
	n = min(n, c.Max)
	normal := min(c.Avg, n)
	// The hash over the 64 bytes before Min, as it would be had it rolled
	// from the start: a boundary then depends on the 64 bytes before it
	// only, wherever the chunk began, and two cuts of the same content
	// that began apart find the same boundaries sooner.
	var fp uint64
	for _, b := range data[c.Min-64 : c.Min] {
		fp = fp<<1 + c.gear[b]
	}
	i, fp, ok := roll(data[:normal], c.Min, fp, &c.gear, c.maskS)
	if ok {
		return i
	}
	if i, _, ok = roll(data[:n], normal, fp, &c.gear, c.maskL); ok {
		return i
	}
	return n
}

// roll rolls the gear hash fp over d from byte from on and returns the
// first boundary: the index of the byte at which the hash has every bit
// of mask clear; or, without one, the hash at the end of d. The hash after
// byte k is fp<<1 + gear[d[k]], a chain of one shift and one add a byte;
// taking two bytes a step (fp<<2 + (t0<<1 + t1), the inner sum off the
// chain) halves the chain, and the hash between is computed beside it.
// Eight bytes an iteration (BenchmarkCut measures it).
func roll(d []byte, from int, fp uint64, g *[256]uint64, mask uint64) (int, uint64, bool) {
	i := from
	for ; i+8 <= len(d); i += 8 {
		b := d[i : i+8 : i+8]
		t0, t1, t2, t3 := g[b[0]], g[b[1]], g[b[2]], g[b[3]]
		f0 := fp<<1 + t0
		f1 := fp<<2 + (t0<<1 + t1)
		f2 := f1<<1 + t2
		f3 := f1<<2 + (t2<<1 + t3)
		if f0&mask == 0 {
			return i, f0, true
		}
		if f1&mask == 0 {
			return i + 1, f1, true
		}
		if f2&mask == 0 {
			return i + 2, f2, true
		}
		if f3&mask == 0 {
			return i + 3, f3, true
		}
		t4, t5, t6, t7 := g[b[4]], g[b[5]], g[b[6]], g[b[7]]
		f4 := f3<<1 + t4
		f5 := f3<<2 + (t4<<1 + t5)
		f6 := f5<<1 + t6
		fp = f5<<2 + (t6<<1 + t7)
		if f4&mask == 0 {
			return i + 4, f4, true
		}
		if f5&mask == 0 {
			return i + 5, f5, true
		}
		if f6&mask == 0 {
			return i + 6, f6, true
		}
		if fp&mask == 0 {
			return i + 7, fp, true
		}
	}
	for ; i < len(d); i++ {
		if fp = fp<<1 + g[d[i]]; fp&mask == 0 {
			return i, fp, true
		}
	}
	return 0, fp, false
}

// Chunker cuts a stream into chunks. Its chunks point into two slabs
// that it fills by turns: while one is cut, a goroutine of its own fills
// the other, once the chunks that were cut from that slab before are done
// with, so the cut never waits for a read or a reader. Each slab is the
// largest chunk's size of head room and slabData largest chunks of the
// stream; a slab's head room holds the tail of the slab before, so the
// chunk that spans the two is whole in the second.
type Chunker struct {
	c *cutter
	r io.Reader
	// cur is the slab being cut, from start on.
	cur    *slab
	start  int
	filled chan *slab // the filler hands slabs over in the stream's order
	free   chan *slab // and takes them back to fill them again
	stop   chan struct{}
	done   chan struct{} // the filler has returned
	slabs  [2]*slab
	closed bool
}

// slabData is a slab's room for the stream, in largest chunks: a slab is
// cut from the start of its head room to within one largest chunk of its
// end, so each slab yields at least this many largest chunks' worth.
const slabData = 2

// ChunkerMemory is what a chunker of these sizes holds: two slabs.
func ChunkerMemory(s Sizes) int64 { return 2 * int64(1+slabData) * int64(s.Max) }

type slab struct {
	buf []byte
	end int  // buf[:end] holds data
	eof bool // the stream ends at end
	err error
	// readers are those of the chunks cut from the slab: the filler
	// writes over it once they are done.
	readers sync.WaitGroup
}

// NewChunker returns a chunker of r with the key's gear table. It reads
// r from a goroutine of its own until Close.
func NewChunker(k Key, s Sizes, r io.Reader) (*Chunker, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	c := &Chunker{c: newCutter(k, s), r: r, filled: make(chan *slab, 2), free: make(chan *slab, 2), stop: make(chan struct{}), done: make(chan struct{})}
	for i := range c.slabs {
		c.slabs[i] = &slab{buf: make([]byte, (1+slabData)*s.Max)}
		c.free <- c.slabs[i]
	}
	go c.fill()
	return c, nil
}

// Next returns the next chunk, or io.EOF after the last one; an empty
// stream has no chunk. The chunk stays as it is until done is called,
// which must be, once: pass it on with the chunk to whoever reads it.
func (c *Chunker) Next() (chunk []byte, done func(), err error) {
	max := c.c.Max
	if c.cur == nil {
		if c.cur, err = c.take(); err != nil {
			return nil, nil, err
		}
		c.start = max
	}
	if s := c.cur; s.end-c.start < max && !s.eof {
		next, err := c.take()
		if err != nil {
			return nil, nil, err
		}
		// next's head room ends with what is left of s.
		c.start = max - (s.end - c.start)
		c.cur = next
		c.free <- s
	}
	s := c.cur
	if c.start == s.end {
		return nil, nil, io.EOF
	}
	n := c.c.cut(s.buf[c.start:s.end])
	chunk = s.buf[c.start : c.start+n]
	c.start += n
	s.readers.Add(1)
	return chunk, s.readers.Done, nil
}

// take waits for the next slab the filler hands over.
func (c *Chunker) take() (*slab, error) {
	s := <-c.filled
	if s.err != nil {
		c.filled <- s // every later call fails the same
		return nil, s.err
	}
	return s, nil
}

// fill is the filler: it fills the slabs given back, in turn, until the
// stream ends, fails, or Close.
func (c *Chunker) fill() {
	defer close(c.done)
	max := c.c.Max
	var prev *slab
	for {
		var s *slab
		select {
		case s = <-c.free:
		case <-c.stop:
			return
		}
		s.readers.Wait()
		s.end = max
		if prev != nil {
			copy(s.buf[:max], prev.buf[prev.end-max:prev.end])
		}
		for s.end < len(s.buf) && s.err == nil && !s.eof {
			var n int
			n, s.err = c.r.Read(s.buf[s.end:])
			s.end += n
			if errors.Is(s.err, io.EOF) {
				s.eof, s.err = true, nil
			}
		}
		c.filled <- s
		if s.eof || s.err != nil {
			return
		}
		prev = s
	}
}

// Close stops the filler, and returns once it no longer reads the stream
// and every chunk's done was called.
func (c *Chunker) Close() {
	if c.closed {
		return
	}
	c.closed = true
	close(c.stop)
	<-c.done
	for _, s := range c.slabs {
		s.readers.Wait()
	}
}
