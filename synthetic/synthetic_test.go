package synthetic

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// read returns all of r, reading it in pieces of n bytes.
func read(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, n)
	for {
		k, err := r.Read(buf)
		out.Write(buf[:k])
		if err == io.EOF {
			return out.Bytes()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestSizeAndDeterminism(t *testing.T) {
	const size = 1<<20 + 12345
	a := read(t, NewReader(7, size), 1<<16)
	b := read(t, NewReader(7, size), 97) // cuts rows everywhere
	if len(a) != size || len(b) != size {
		t.Fatalf("read %d and %d bytes, want %d", len(a), len(b), size)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("the same seed read in different pieces gave different bytes")
	}
	c := read(t, NewReader(8, size), 1<<16)
	if bytes.Equal(a, c) {
		t.Fatal("seeds 7 and 8 gave the same bytes")
	}
	if n := bytes.Count(a, []byte("\n")); n < size/250 {
		t.Fatalf("%d lines in %d bytes: not rows of a dump", n, size)
	}
	if !bytes.Contains(a, []byte("\tshipped\t")) {
		t.Fatalf("no status column in %q…", a[:200])
	}
}

func TestSource(t *testing.T) {
	ctx := context.Background()
	s := New(3, 5000)
	infos, err := s.Streams(ctx)
	if err != nil || len(infos) != 3 || infos[2].Name != "synthetic-003.sql" || infos[2].Size != 5000 {
		t.Fatalf("Streams = %+v, %v", infos, err)
	}
	var got [][]byte
	for _, in := range infos {
		rc, err := s.Open(ctx, in.Name)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, read(t, rc, 4096))
		rc.Close()
	}
	if len(got[0]) != 5000 || bytes.Equal(got[0], got[1]) {
		t.Fatal("streams are not 5000 bytes each, or two streams are the same")
	}
	if _, err := s.Open(ctx, "nope"); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("Open of an unknown stream: %v, want ErrNotFound", err)
	}
}

// TestRatio checks that zstd -3 in 4 MiB frames (as pipe's compress stage
// cuts them) compresses the data 3-5×, as real dumps compress.
func TestRatio(t *testing.T) {
	const frame, frames = 4 << 20, 4
	data := read(t, NewReader(1, frame*frames), 1<<20)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	stored := 0
	for i := 0; i < frames; i++ {
		stored += len(enc.EncodeAll(data[i*frame:(i+1)*frame], nil))
	}
	ratio := float64(len(data)) / float64(stored)
	t.Logf("zstd level 3, 4 MiB frames: %.2f×", ratio)
	if ratio < 3 || ratio > 5 {
		t.Fatalf("ratio %.2f× is outside 3-5×", ratio)
	}
}

func BenchmarkRead(b *testing.B) {
	buf := make([]byte, 4<<20)
	b.SetBytes(int64(len(buf)))
	r := NewReader(1, 1<<62)
	for b.Loop() {
		if _, err := io.ReadFull(r, buf); err != nil {
			b.Fatal(err)
		}
	}
}
