package compress

import (
	"context"
	"fmt"
	"io"

	"github.com/pipebackup/pipe/engine"
)

// Streaming, for objects that are not held in memory (a WAL segment read
// from its file in blocks): a FrameWriter compresses what is written to
// it in independent frames of a fixed size, the compress stage's format,
// with the codec's one-shot encoder (libzstd's fast path, which a
// streaming encoder's window wrapping around leaves: 20% more CPU for a
// WAL segment), holding one frame, its bound and the encoder's state
// (FrameMemory), however large the object. Frames of 1 MiB store a WAL
// segment within 1% of one frame's size.

// FrameWriter writes what is written to it to an io.Writer as frames of
// the codec. One is reused for object after object (Reset): its encoder
// and buffers are allocated once.
type FrameWriter struct {
	enc     engine.Worker
	in, out []byte
	w       io.Writer
	frames  int
}

// NewFrameWriter returns a FrameWriter at level with frames of frame
// bytes; Reset gives it its writer.
func (c *Codec) NewFrameWriter(level, frame int) (*FrameWriter, error) {
	if err := c.CheckLevel(level); err != nil {
		return nil, err
	}
	enc, err := c.newEncoder(level)
	if err != nil {
		return nil, err
	}
	return &FrameWriter{enc: enc, in: make([]byte, 0, frame), out: make([]byte, 0, Bound(frame))}, nil
}

// Reset starts a new object, written to w.
func (f *FrameWriter) Reset(w io.Writer) { f.w, f.in, f.frames = w, f.in[:0], 0 }

func (f *FrameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := copy(f.in[len(f.in):cap(f.in)], p)
		f.in, p = f.in[:len(f.in)+k], p[k:]
		if len(f.in) == cap(f.in) {
			if err := f.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// Close writes the last frame (an empty object is one empty frame, a
// valid file of the codec), and does not close the writer.
func (f *FrameWriter) Close() error {
	if len(f.in) > 0 || f.frames == 0 {
		return f.flush()
	}
	return nil
}

func (f *FrameWriter) flush() error {
	out, err := f.enc.Map(f.out[:0], f.in)
	if err != nil {
		return err
	}
	f.in = f.in[:0]
	f.frames++
	_, err = f.w.Write(out)
	return err
}

// FrameMemory is what a FrameWriter at level with frames of frame bytes
// holds, or the decoder of what it wrote (DecodeStream), the larger: a
// frame, its bound and the encoder's state.
func (c *Codec) FrameMemory(level, frame int) int64 {
	return int64(frame) + int64(Bound(frame)) + c.encMemory(level, frame)
}

// DecodeStream decompresses r (any number of frames) into w as it reads,
// refusing output of more than limit bytes: what was written before an
// error is the caller's to discard. Frames carry no checksum: a byte
// changed inside one may decode, without an error, to other bytes, which
// the caller's digest of the output catches.
func (c *Codec) DecodeStream(ctx context.Context, w io.Writer, r io.Reader, limit int64) error {
	out := &limitWriter{w: w, limit: limit}
	var err error
	switch p := c.decoder(1).(type) {
	case interface {
		Decode(dst io.Writer, src io.Reader) error
	}:
		err = p.Decode(out, r)
	case engine.Streamer:
		err = p.Stream(ctx, out, r)
	default:
		return fmt.Errorf("%s cannot decode a stream", c.Name)
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
