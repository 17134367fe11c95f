package compress

import (
	"bytes"
	"context"
	"testing"
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
