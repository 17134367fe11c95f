package compress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"golang.org/x/sync/errgroup"
)

// TestEncodeIntoStorage holds Encode to its contract: the caller's buffer
// when it holds the bound (a pusher reuses one per segment), a new one
// when it does not, and a frame that decodes to the input either way.
func TestEncodeIntoStorage(t *testing.T) {
	src := text(7, 3*chunk+5)
	for _, name := range Names() {
		c, _ := Lookup(name)
		if name == "none" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			level := c.DefaultLevel
			big := make([]byte, 3, Bound(len(src)))
			out, err := c.Encode(level, big, src)
			if err != nil {
				t.Fatal(err)
			}
			if len(out) == 0 || &out[:1][0] != &big[:1][0] {
				t.Errorf("Encode did not write into the buffer it was given (cap %d)", cap(big))
			}
			small := make([]byte, 0, 16)
			out2, err := c.Encode(level, small, src)
			if err != nil {
				t.Fatal(err)
			}
			if cap(out2) == cap(small) {
				t.Errorf("Encode wrote into a buffer smaller than the bound")
			}
			for _, o := range [][]byte{out, out2} {
				var got bytes.Buffer
				if err := c.DecodeTo(context.Background(), &got, o, int64(len(src))); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got.Bytes(), src) {
					t.Fatalf("decoded %d bytes, not the %d encoded", got.Len(), len(src))
				}
			}
		})
	}
}

// TestDecodeToReusesDecoders: DecodeTo decodes with pooled decoders; one
// that failed on corrupt data, or on output over the limit, decodes the
// next object correctly, and several decode at once.
func TestDecodeToReusesDecoders(t *testing.T) {
	c, _ := Lookup("zstd")
	src := text(9, 5*chunk+3)
	frame, err := c.Encode(3, nil, src)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Clone(frame)
	corrupt[len(corrupt)/2] ^= 0xff
	ctx := context.Background()
	for range 3 {
		if err := c.DecodeTo(ctx, io.Discard, corrupt, int64(len(src))); err == nil {
			t.Error("DecodeTo accepted a corrupt frame")
		}
		if err := c.DecodeTo(ctx, io.Discard, frame, int64(len(src)-1)); err == nil || !strings.Contains(err.Error(), "more than") {
			t.Errorf("DecodeTo over the limit: %v", err)
		}
	}
	var g errgroup.Group
	for range 8 {
		g.Go(func() error {
			var got bytes.Buffer
			if err := c.DecodeTo(ctx, &got, frame, int64(len(src))); err != nil {
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
