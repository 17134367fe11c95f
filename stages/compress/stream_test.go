package compress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"golang.org/x/sync/errgroup"
)

// A FrameWriter writes objects of any size, one after the other with the
// same encoder, as frames of its size that DecodeStream reads back: an
// empty object, one shorter than a frame, whole frames, and a last frame
// cut short; written in pieces of any size.
func TestFrameWriter(t *testing.T) {
	const frame = 3 * chunk
	for _, name := range Names() {
		c, _ := Lookup(name)
		if name == "none" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			fw, err := c.NewFrameWriter(c.DefaultLevel, frame)
			if err != nil {
				t.Fatal(err)
			}
			for i, n := range []int{0, 5, frame, 4 * frame, 2*frame + 17} {
				src := text(uint64(i), n)
				var stored bytes.Buffer
				fw.Reset(&stored)
				for off := 0; off < n; {
					k := min(n-off, 1+off%7919) // pieces that do not line up with frames
					if _, err := fw.Write(src[off : off+k]); err != nil {
						t.Fatal(err)
					}
					off += k
				}
				if err := fw.Close(); err != nil {
					t.Fatal(err)
				}
				if stored.Len() == 0 {
					t.Fatalf("%d bytes: nothing written, not even an empty frame", n)
				}
				var got bytes.Buffer
				if err := c.DecodeStream(context.Background(), &got, &stored, int64(n)); err != nil {
					t.Fatalf("%d bytes: %v", n, err)
				}
				if !bytes.Equal(got.Bytes(), src) {
					t.Fatalf("%d bytes: decoded %d, not what was written", n, got.Len())
				}
			}
		})
	}
}

// DecodeStream decodes with pooled decoders: one that failed on corrupt
// data, or on output over the limit, decodes the next object correctly,
// and several decode at once.
func TestDecodeStreamReusesDecoders(t *testing.T) {
	c, _ := Lookup("zstd")
	src := text(9, 5*chunk+3)
	frames := encodeFrames(t, c, src, 2*chunk)
	// Cut off within a frame: an error for any decoder. (The frames carry
	// no checksum, so a byte changed inside a block may decode to other
	// bytes of the right length; DecodeStream's caller checks a digest, as
	// wal does: TestTampered.)
	corrupt := bytes.Clone(frames[:len(frames)/2])
	ctx := context.Background()
	for range 3 {
		if err := c.DecodeStream(ctx, io.Discard, bytes.NewReader(corrupt), int64(len(src))); err == nil {
			t.Error("DecodeStream accepted a corrupt frame")
		}
		if err := c.DecodeStream(ctx, io.Discard, bytes.NewReader(frames), int64(len(src)-1)); err == nil || !strings.Contains(err.Error(), "more than") {
			t.Errorf("DecodeStream over the limit: %v", err)
		}
	}
	var g errgroup.Group
	for range 8 {
		g.Go(func() error {
			var got bytes.Buffer
			if err := c.DecodeStream(ctx, &got, bytes.NewReader(frames), int64(len(src))); err != nil {
				return err
			}
			if !bytes.Equal(got.Bytes(), src) {
				return fmt.Errorf("decoded %d bytes, not the %d encoded", got.Len(), len(src))
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// DecodeStream decodes a frame of up to decodeFrame at a time; a larger
// one (a stream of other frames, or written before frames were 1 MiB)
// switches the rest of the stream to the streaming decoder, mid-stream
// too.
func TestDecodeStreamLargeFrames(t *testing.T) {
	c, _ := Lookup("zstd")
	encode := func(src []byte, frame int) []byte { return encodeFrames(t, c, src, frame) }
	small, large := text(1, 2*decodeFrame+5), text(2, 5*decodeFrame/2)
	for _, tc := range []struct {
		name   string
		stored []byte
		want   []byte
	}{
		{"frames of decodeFrame", encode(small, decodeFrame), small},
		{"frames of 2 × decodeFrame", encode(large, 2*decodeFrame), large},
		{"small frames, then large ones", append(encode(small, decodeFrame), encode(large, 2*decodeFrame)...), append(bytes.Clone(small), large...)},
	} {
		var got bytes.Buffer
		if err := c.DecodeStream(context.Background(), &got, bytes.NewReader(tc.stored), int64(len(tc.want))); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !bytes.Equal(got.Bytes(), tc.want) {
			t.Errorf("%s: decoded %d bytes, not the %d encoded", tc.name, got.Len(), len(tc.want))
		}
	}
}

// encodeFrames is src written by c's FrameWriter at level 3 in frames of
// frame bytes.
func encodeFrames(t *testing.T, c *Codec, src []byte, frame int) []byte {
	t.Helper()
	fw, err := c.NewFrameWriter(3, frame)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	fw.Reset(&b)
	if _, err := fw.Write(src); err != nil {
		t.Fatal(err)
	}
	if err := fw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A read that fails within a frame is reported as itself (a network or
// decryption failure), and data that ends within one as truncated.
func TestDecodeStreamReadErrors(t *testing.T) {
	c, _ := Lookup("zstd")
	src := text(3, 3*chunk)
	frames := encodeFrames(t, c, src, 2*chunk)
	boom := errors.New("the connection was reset")
	for _, tc := range []struct {
		name string
		r    io.Reader
		want error
	}{
		{"a read failing", io.MultiReader(bytes.NewReader(frames[:len(frames)/2]), iotest.ErrReader(boom)), boom},
		{"the data ending", bytes.NewReader(frames[:len(frames)/2]), errTruncated},
	} {
		err := c.DecodeStream(context.Background(), io.Discard, tc.r, int64(len(src)))
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
