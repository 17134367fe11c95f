package gcs

import (
	"bytes"
	"context"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/pipebackup/pipe/plugins/sdk"
)

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// fakeObject serves ranges of data, failing on request.
type fakeObject struct {
	data []byte

	mu    sync.Mutex
	opens int
	// fail: ranges (by offset) that fail this many more times, with err.
	fail map[int64]int
	err  error
}

func (f *fakeObject) open(ctx context.Context, off, n int64) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens++
	if f.fail[off] > 0 {
		f.fail[off]--
		return nil, f.err
	}
	return io.NopCloser(bytes.NewReader(f.data[off : off+n])), nil
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Every size reads back whole, with its CRC32C checked.
func TestGCSReadRanges(t *testing.T) {
	const part = 1000
	for _, size := range []int{0, 1, part - 1, part, part + 1, 10*part + 17} {
		for _, conc := range []int{1, 3} {
			data := randomBytes(uint64(size), size)
			f := &fakeObject{data: data}
			r, err := openRanges(context.Background(), f.open, rangeOptions{size: int64(size), part: part, conc: conc, crc: crcOf(data), checkCRC: true})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("size %d conc %d: %d bytes, %v", size, conc, len(got), err)
			}
			if want := (size + part - 1) / part; f.opens != want {
				t.Errorf("size %d: %d ranges opened, want %d", size, f.opens, want)
			}
		}
	}
}

// Bytes that do not match the object's CRC32C fail the read at its end.
func TestGCSReadCRC(t *testing.T) {
	c := testClient()
	data := randomBytes(4, 2500)
	f := &fakeObject{data: data}
	r, err := openRanges(context.Background(), f.open, rangeOptions{size: int64(len(data)), part: 1000, conc: 2, crc: crcOf(data) ^ 1, checkCRC: true,
		explain: func(op string, err error) error { return c.explain(op, "dir/obj", err) }})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := io.ReadAll(r)
	if !errors.Is(err, errChanged) || !strings.Contains(err.Error(), "gs://bkt/dir/obj") || len(got) != len(data) {
		t.Fatalf("a CRC32C mismatch went unnoticed: %d bytes, %v", len(got), err)
	}
}

// A range whose object is gone is not asked again: the error names the
// object and wraps sdk.ErrNotFound. A server error is asked again.
func TestGCSReadRetriable(t *testing.T) {
	c := testClient()
	explain := func(op string, err error) error { return c.explain(op, "dir/obj", err) }
	f := &fakeObject{data: []byte("abc"), fail: map[int64]int{0: 3}, err: storage.ErrObjectNotExist}
	r, err := openRanges(context.Background(), f.open, rangeOptions{size: 3, part: 1000, conc: 1, retries: 5, explain: explain})
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(r)
	r.Close()
	if !errors.Is(err, sdk.ErrNotFound) || !strings.Contains(err.Error(), "gs://bkt/dir/obj") || f.opens != 1 {
		t.Fatalf("after %d requests: %v", f.opens, err)
	}

	f = &fakeObject{data: []byte("abc"), fail: map[int64]int{0: 1}, err: &googleapi.Error{Code: 503}}
	r, err = openRanges(context.Background(), f.open, rangeOptions{size: 3, part: 1000, conc: 1, retries: 5, explain: explain})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || string(got) != "abc" || f.opens != 2 {
		t.Fatalf("after %d requests: %q, %v", f.opens, got, err)
	}
}
