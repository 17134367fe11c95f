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
	"time"

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

// fakeObject serves ranges of data, failing or blocking on request.
type fakeObject struct {
	data []byte

	mu          sync.Mutex
	opens       int
	inFlight    int
	maxInFlight int
	// fail: ranges (by offset) that fail this many more times, with err
	// (a short read when err is nil).
	fail  map[int64]int
	err   error
	block bool // ranges block until their context ends
}

func (f *fakeObject) open(ctx context.Context, off, n int64) (io.ReadCloser, error) {
	f.mu.Lock()
	f.opens++
	left := f.fail[off]
	if left > 0 {
		f.fail[off] = left - 1
	}
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.mu.Unlock()
	done := func() {
		f.mu.Lock()
		f.inFlight--
		f.mu.Unlock()
	}
	if f.block {
		<-ctx.Done()
		done()
		return nil, ctx.Err()
	}
	if left > 0 {
		if f.err != nil {
			done()
			return nil, f.err
		}
		return &fakeBody{r: bytes.NewReader(f.data[off : off+n/2]), done: done}, nil // short
	}
	return &fakeBody{r: bytes.NewReader(f.data[off : off+n]), done: done}, nil
}

type fakeBody struct {
	r    io.Reader
	done func()
	once sync.Once
}

func (b *fakeBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *fakeBody) Close() error               { b.once.Do(b.done); return nil }

func noPause(int) time.Duration { return 0 }

func crcOf(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

func TestGCSRangeReaderSizes(t *testing.T) {
	const part = 1000
	for _, size := range []int{0, 1, part - 1, part, part + 1, 10*part + 17} {
		for _, conc := range []int{1, 3, 16} {
			data := randomBytes(uint64(size), size)
			f := &fakeObject{data: data}
			r := newRangeReader(context.Background(), f.open, rangeOptions{size: int64(size), part: part, conc: conc, crc: crcOf(data), checkCRC: true, pause: noPause})
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("size %d conc %d: %d bytes, %v", size, conc, len(got), err)
			}
			if want := (size + part - 1) / part; f.opens != want {
				t.Errorf("size %d: %d ranges opened, want %d", size, f.opens, want)
			}
			if f.maxInFlight > conc {
				t.Errorf("size %d: %d ranges in flight, concurrency is %d", size, f.maxInFlight, conc)
			}
		}
	}
}

// The reader never holds more than conc parts: with a consumer that does
// not read, only conc ranges are fetched.
func TestGCSRangeReaderBoundedMemory(t *testing.T) {
	const part, conc = 100, 4
	data := randomBytes(1, 100*part)
	f := &fakeObject{data: data}
	r := newRangeReader(context.Background(), f.open, rangeOptions{size: int64(len(data)), part: part, conc: conc, pause: noPause})
	defer r.Close()
	time.Sleep(100 * time.Millisecond)
	f.mu.Lock()
	opens := f.opens
	f.mu.Unlock()
	if opens != conc {
		t.Fatalf("%d ranges fetched ahead of a consumer that reads nothing; want %d", opens, conc)
	}
	buf := make([]byte, part) // one part consumed frees one buffer
	if _, err := io.ReadFull(r, buf); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(buf[:1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	f.mu.Lock()
	opens = f.opens
	f.mu.Unlock()
	if opens != conc+1 {
		t.Fatalf("%d ranges fetched after one part was consumed; want %d", opens, conc+1)
	}
}

func TestGCSRangeReaderRetries(t *testing.T) {
	const part = 1000
	data := randomBytes(2, 5*part+3)
	for name, f := range map[string]*fakeObject{
		"short reads":   {data: data, fail: map[int64]int{0: 2, 3 * part: 1}},
		"server 503":    {data: data, fail: map[int64]int{part: 3, 5 * part: 3}, err: &googleapi.Error{Code: 503}},
		"reset by peer": {data: data, fail: map[int64]int{2 * part: 1}, err: errors.New("read: connection reset by peer")},
	} {
		r := newRangeReader(context.Background(), f.open, rangeOptions{size: int64(len(data)), part: part, conc: 2, retries: 3, crc: crcOf(data), checkCRC: true, pause: noPause})
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
	}
}

func TestGCSRangeReaderGivesUp(t *testing.T) {
	const part = 1000
	data := randomBytes(3, 3*part)
	f := &fakeObject{data: data, fail: map[int64]int{part: 100}, err: &googleapi.Error{Code: 503}}
	r := newRangeReader(context.Background(), f.open, rangeOptions{size: int64(len(data)), part: part, conc: 2, retries: 2, pause: noPause})
	defer r.Close()
	_, err := io.ReadAll(r)
	if err == nil || !strings.Contains(err.Error(), "bytes 1000-1999 (3 attempts)") {
		t.Fatalf("err = %v", err)
	}
	if f.fail[part] != 100-3 {
		t.Fatalf("the range was tried %d times, want 3", 100-f.fail[part])
	}

	// A missing object is not retried.
	f = &fakeObject{data: data, fail: map[int64]int{0: 100}, err: storage.ErrObjectNotExist}
	r = newRangeReader(context.Background(), f.open, rangeOptions{size: int64(len(data)), part: part, conc: 1, retries: 5, pause: noPause})
	defer r.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, storage.ErrObjectNotExist) || f.fail[0] != 99 {
		t.Fatalf("err = %v after %d attempts", err, 100-f.fail[0])
	}
}

func TestGCSRangeReaderCRC(t *testing.T) {
	data := randomBytes(4, 2500)
	f := &fakeObject{data: data}
	r := newRangeReader(context.Background(), f.open, rangeOptions{size: int64(len(data)), part: 1000, conc: 2, crc: crcOf(data) ^ 1, checkCRC: true, pause: noPause})
	defer r.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, errChanged) {
		t.Fatalf("a CRC32C mismatch went unnoticed: %v", err)
	}
}

func TestGCSRangeReaderCancel(t *testing.T) {
	data := randomBytes(5, 10_000)
	// Cancelling the context stops blocked reads at once.
	f := &fakeObject{data: data, block: true}
	ctx, cancel := context.WithCancel(context.Background())
	r := newRangeReader(ctx, f.open, rangeOptions{size: int64(len(data)), part: 1000, conc: 4, pause: noPause})
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Read went on after the context was cancelled")
	}
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close hangs")
	}
	if f.inFlight != 0 {
		t.Fatalf("%d ranges still in flight after Close", f.inFlight)
	}

	// Close before the end stops the fetches, with none left behind.
	f = &fakeObject{data: data, block: true}
	r = newRangeReader(context.Background(), f.open, rangeOptions{size: int64(len(data)), part: 1000, conc: 4, pause: noPause})
	time.Sleep(20 * time.Millisecond)
	r.Close()
	if f.inFlight != 0 {
		t.Fatalf("%d ranges in flight after Close", f.inFlight)
	}
	if _, err := r.Read(make([]byte, 1)); err == nil {
		t.Fatal("Read after Close succeeded")
	}
}

// Errors name the object through explain, and a missing object wraps
// sdk.ErrNotFound.
func TestGCSRangeReaderExplains(t *testing.T) {
	c := testClient()
	f := &fakeObject{data: []byte("abc"), fail: map[int64]int{0: 1}, err: storage.ErrObjectNotExist}
	r := newRangeReader(context.Background(), f.open, rangeOptions{size: 3, part: 1000, conc: 1, pause: noPause,
		explain: func(op string, err error) error { return c.explain(op, "dir/obj", err) }})
	defer r.Close()
	_, err := io.ReadAll(r)
	if !errors.Is(err, sdk.ErrNotFound) || !strings.Contains(err.Error(), "gs://bkt/dir/obj") {
		t.Fatalf("err = %v", err)
	}
}
