package dedup

import (
	"errors"
	"fmt"
	"io"

	cdc "github.com/PlakarKorp/go-cdc-chunkers"
	_ "github.com/PlakarKorp/go-cdc-chunkers/chunkers/fastcdc" // registers FastCDC
)

// algorithm is FastCDC as its paper specifies it (normalized chunking,
// level 2), with the gear table keyed (cdc's "fastcdc-v1.0.0" with a key).
const algorithm = "fastcdc-v1.0.0"

// Sizes bound the chunks a stream is cut into.
type Sizes struct {
	Min, Avg, Max int
}

// DefaultSizes are 256 KiB, 1 MiB and 4 MiB: large enough that a run of a
// terabyte has a million chunks (an index of ~150 MiB), small enough that
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

// Chunker cuts a stream into chunks.
type Chunker struct {
	c   *cdc.Chunker
	end bool
}

// NewChunker returns a chunker of r with the key's gear table. buf, of at
// least 2 × s.Max bytes, is where it reads ahead; its chunks point into it.
func NewChunker(k Key, s Sizes, r io.Reader, buf []byte) (*Chunker, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	c, err := cdc.NewChunkerBuffer(algorithm, r, &cdc.ChunkerOpts{MinSize: s.Min, NormalSize: s.Avg, MaxSize: s.Max, Key: k.cut}, buf)
	if err != nil {
		return nil, fmt.Errorf("chunker: %w", err)
	}
	return &Chunker{c: c}, nil
}

// Next returns the next chunk, valid until the next call, or io.EOF after
// the last one. An empty stream has no chunk.
func (c *Chunker) Next() ([]byte, error) {
	if c.end {
		return nil, io.EOF
	}
	b, err := c.c.Next()
	if errors.Is(err, io.EOF) {
		c.end = true
		if len(b) == 0 {
			return nil, io.EOF
		}
		return b, nil
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

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
