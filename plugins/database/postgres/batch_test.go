package postgres

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"
)

// pgx reads a worker's socket in pieces of its own size; batchedSocket
// hands every byte on in order, whatever the socket's reads return, and
// the socket's end after them.
func TestBatchedSocket(t *testing.T) {
	want := make([]byte, 100<<10+7)
	for i := range want {
		want[i] = byte(i % 251)
	}
	// The socket returns at most 6000 bytes a read (each short: a pause
	// after it), pgx asks 7 bytes at a time.
	b := &batchedSocket{r: iotest.HalfReader(&pieces{r: bytes.NewReader(want), max: 6000}), buf: make([]byte, batchedSocketBuffer)}
	var got bytes.Buffer
	p := make([]byte, 7)
	for {
		n, err := b.Read(p)
		got.Write(p[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("%d bytes came through, want %d", got.Len(), len(want))
	}
}

type pieces struct {
	r   io.Reader
	max int
}

func (p *pieces) Read(b []byte) (int, error) { return p.r.Read(b[:min(len(b), p.max)]) }
