package compress

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/pipebackup/pipe/engine"
)

// Encode compresses src whole into one frame at level: a standard file of
// the codec, for objects small enough to hold in memory (a WAL segment).
// It writes into dst's storage when its capacity is at least
// Bound(len(src)), else into a new buffer: a caller that encodes many
// objects reuses one instead of touching fresh memory for each.
func (c *Codec) Encode(level int, dst, src []byte) ([]byte, error) {
	if err := c.CheckLevel(level); err != nil {
		return nil, err
	}
	w, err := c.newEncoder(level)
	if err != nil {
		return nil, err
	}
	if cap(dst) < Bound(len(src)) {
		dst = make([]byte, 0, Bound(len(src)))
	}
	return w.Map(dst[:0], src)
}

// DecodeTo decompresses src (any number of frames) into w, refusing
// output of more than limit bytes: what was written before the refusal
// is the caller's to discard.
func (c *Codec) DecodeTo(ctx context.Context, w io.Writer, src []byte, limit int64) error {
	out := &limitWriter{w: w, limit: limit}
	var err error
	switch p := c.decoder(1).(type) {
	case interface {
		Decode(dst io.Writer, src []byte) error
	}:
		err = p.Decode(out, src)
	case engine.Streamer:
		err = p.Stream(ctx, out, bytes.NewReader(src))
	case interface {
		Rest(ctx context.Context, dst io.Writer, src io.Reader) error
	}:
		err = p.Rest(ctx, out, bytes.NewReader(src))
	default:
		return fmt.Errorf("%s cannot decode a buffer", c.Name)
	}
	if out.over {
		return fmt.Errorf("%s data decodes to more than %d bytes", c.Name, limit)
	}
	return err
}

// limitWriter passes at most limit bytes on to w.
type limitWriter struct {
	w     io.Writer
	n     int64
	limit int64
	over  bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n+int64(len(p)) > l.limit {
		l.over = true
		return 0, fmt.Errorf("more than %d bytes", l.limit)
	}
	n, err := l.w.Write(p)
	l.n += int64(n)
	return n, err
}

// BufferMemory is what Encode and DecodeTo of an object of n bytes hold
// besides the object and its compressed form: the encoder's or decoder's
// state, the larger of the two.
func (c *Codec) BufferMemory(level, n int) int64 {
	return max(c.encMemory(level, n), c.decMemory(n))
}
