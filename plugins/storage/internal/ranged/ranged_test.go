package ranged

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// fakeObject serves ranges of data, failing, cutting or blocking on
// request, and records what it was asked.
type fakeObject struct {
	data []byte

	mu          sync.Mutex
	requests    []string // "off-end"
	inFlight    int
	maxInFlight int
	// fail: requests at these offsets fail this many more times, with
	// err; or, when err is nil, their bodies break off after cut bytes
	// (half the range when cut is 0).
	fail  map[int64]int
	err   error
	cut   int
	cutAt map[int64]int // cut for requests at an offset, instead of cut
	block bool          // requests block until their context ends
	extra int           // bytes sent beyond the range
}

func (f *fakeObject) fetch(ctx context.Context, off, n int64) (io.ReadCloser, error) {
	f.mu.Lock()
	f.requests = append(f.requests, fmt.Sprintf("%d-%d", off, off+n-1))
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
		cut := int64(f.cut)
		if c, ok := f.cutAt[off]; ok {
			cut = int64(c)
		}
		if cut == 0 {
			cut = n / 2
		}
		return &fakeBody{r: bytes.NewReader(f.data[off : off+min(cut, n)]), done: done}, nil
	}
	end := min(off+n+int64(f.extra), int64(len(f.data)))
	return &fakeBody{r: bytes.NewReader(f.data[off:end]), done: done}, nil
}

func (f *fakeObject) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fakeObject) asked(want string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.requests {
		if r == want {
			return true
		}
	}
	return false
}

type fakeBody struct {
	r    io.Reader
	done func()
	once sync.Once
}

func (b *fakeBody) Read(p []byte) (int, error) { return b.r.Read(p) }
func (b *fakeBody) Close() error               { b.once.Do(b.done); return nil }

func noPause(int) time.Duration { return 0 }

// explain names the object, as the plugins' Explain does.
func explain(op string, err error) error { return fmt.Errorf("%s mem://obj: %w", op, err) }

func open(t *testing.T, f *fakeObject, o Options) io.ReadCloser {
	t.Helper()
	if o.Size == 0 && o.First == nil {
		o.Size = int64(len(f.data))
	}
	o.Fetch = f.fetch
	if o.Backoff == nil {
		o.Backoff = noPause
	}
	if o.Explain == nil {
		o.Explain = explain
	}
	r, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestSizes(t *testing.T) {
	const part = 1000
	for _, size := range []int{0, 1, part - 1, part, part + 1, 10*part + 17} {
		for _, conc := range []int{1, 3, 16} {
			data := randomBytes(uint64(size), size)
			f := &fakeObject{data: data}
			r := open(t, f, Options{Size: int64(size), PartSize: part, Concurrency: conc})
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("size %d conc %d: %d bytes, %v", size, conc, len(got), err)
			}
			if want := (size + part - 1) / part; f.count() != want {
				t.Errorf("size %d: %d ranges requested, want %d: %v", size, f.count(), want, f.requests)
			}
			if f.maxInFlight > conc {
				t.Errorf("size %d: %d ranges in flight, concurrency is %d", size, f.maxInFlight, conc)
			}
		}
	}
}

// WriteTo hands out the same bytes as Read, also after a partial Read, in
// writes of whole parts.
func TestWriteTo(t *testing.T) {
	const part = 1000
	data := randomBytes(9, 10*part+17)
	f := &fakeObject{data: data}
	r := open(t, f, Options{PartSize: part, Concurrency: 3})
	defer r.Close()
	head := make([]byte, 10)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	w := &countingWriter{}
	n, err := r.(io.WriterTo).WriteTo(w)
	if err != nil || n != int64(len(data)-10) || !bytes.Equal(append(head, w.buf.Bytes()...), data) {
		t.Fatalf("WriteTo: %d bytes, %v", n, err)
	}
	if w.writes != 11 {
		t.Errorf("%d writes, want 11 (the rest of the first part, then whole parts)", w.writes)
	}
	// A failed write is WriteTo's error.
	r = open(t, &fakeObject{data: data}, Options{PartSize: part, Concurrency: 3})
	defer r.Close()
	if _, err := r.(io.WriterTo).WriteTo(failingWriter{}); err == nil || err.Error() != "full" {
		t.Fatalf("err = %v", err)
	}
}

type countingWriter struct {
	buf    bytes.Buffer
	writes int
}

func (w *countingWriter) Write(b []byte) (int, error) { w.writes++; return w.buf.Write(b) }

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("full") }

// The reader never holds more than Concurrency parts: with a consumer that
// does not read, only Concurrency ranges are fetched, and each part read
// lets one more start.
func TestBoundedMemory(t *testing.T) {
	const part, conc = 100, 4
	data := randomBytes(1, 100*part)
	f := &fakeObject{data: data}
	r := open(t, f, Options{PartSize: part, Concurrency: conc})
	defer r.Close()
	time.Sleep(100 * time.Millisecond)
	if n := f.count(); n != 0 {
		t.Fatalf("%d ranges fetched before the first Read; want none (WriteAtTo may come instead)", n)
	}
	buf := make([]byte, part)
	if _, err := io.ReadFull(r, buf[:1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := f.count(); n != conc {
		t.Fatalf("%d ranges fetched ahead of a consumer that read one byte; want %d", n, conc)
	}
	// One part consumed frees one buffer.
	if _, err := io.ReadFull(r, buf[1:]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Read(buf[:1]); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if n := f.count(); n != conc+1 {
		t.Fatalf("%d ranges fetched after one part was consumed; want %d", n, conc+1)
	}
	// The buffers are reused, not allocated per part.
	rr := r.(*Reader)
	if len(rr.free) != 0 || len(rr.queue) != conc-1 {
		t.Fatalf("%d free buffers and %d parts queued", len(rr.free), len(rr.queue))
	}
	for _, p := range rr.queue {
		<-p.done
	}
	if cap(rr.queue[len(rr.queue)-1].buf) != part {
		t.Fatal("a part got a buffer of another size")
	}
}

// A range whose body breaks off is asked again for its missing bytes
// only.
func TestResumesFromTheMissingByte(t *testing.T) {
	const part = 200 << 10
	data := randomBytes(2, 3*part+5)
	f := &fakeObject{data: data, fail: map[int64]int{0: 1, part: 1, 2 * part: 1}, cut: 100 << 10}
	var logged bytes.Buffer
	r := open(t, f, Options{PartSize: part, Concurrency: 2, Retries: 1, Log: slog.New(slog.NewJSONHandler(&logged, nil))})
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if n := strings.Count(logged.String(), `"event":"retry"`); n != 3 {
		t.Errorf("%d retries logged, want 3 (one per broken range):\n%s", n, logged.String())
	}
	for i := int64(0); i < 3; i++ {
		want := fmt.Sprintf("%d-%d", i*part+100<<10, (i+1)*part-1)
		if !f.asked(want) {
			t.Errorf("no resumed request %s in %v", want, f.requests)
		}
	}
	if f.count() != 7 {
		t.Errorf("%d requests, want 7: %v", f.count(), f.requests)
	}
}

// Retryable decides which failed requests are repeated; breaks are
// resumed whatever it says.
func TestRetries(t *testing.T) {
	const part = 1000
	data := randomBytes(3, 5*part+3)
	errBusy := errors.New("503")
	retryable := func(err error) bool { return errors.Is(err, errBusy) }
	for name, f := range map[string]*fakeObject{
		"short reads":   {data: data, fail: map[int64]int{0: 2, 3 * part: 1}},
		"server 503":    {data: data, fail: map[int64]int{part: 3, 5 * part: 3}, err: errBusy},
		"reset by peer": {data: data, fail: map[int64]int{2 * part: 1}, err: fmt.Errorf("read: connection reset by peer: %w", errBusy)},
	} {
		r := open(t, f, Options{PartSize: part, Concurrency: 2, Retries: 3, Retryable: retryable})
		got, err := io.ReadAll(r)
		r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes, %v", name, len(got), err)
		}
	}
	// Without Retryable a failed request is final (the store's client
	// retried it already).
	f := &fakeObject{data: data, fail: map[int64]int{part: 1}, err: errBusy}
	r := open(t, f, Options{PartSize: part, Concurrency: 2, Retries: 3})
	defer r.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, errBusy) || !strings.Contains(err.Error(), "reading bytes 1000-1999 of mem://obj") {
		t.Fatalf("err = %v", err)
	}
}

func TestGivesUp(t *testing.T) {
	const part = 1000
	data := randomBytes(4, 3*part)
	errBusy := errors.New("503")
	f := &fakeObject{data: data, fail: map[int64]int{part: 100}, err: errBusy}
	r := open(t, f, Options{PartSize: part, Concurrency: 2, Retries: 2, Retryable: func(error) bool { return true }})
	_, err := io.ReadAll(r)
	r.Close()
	if !errors.Is(err, errBusy) || !strings.Contains(err.Error(), "reading bytes 1000-1999 (3 attempts) of mem://obj") {
		t.Fatalf("err = %v", err)
	}
	if f.fail[part] != 100-3 {
		t.Fatalf("the range was tried %d times, want 3", 100-f.fail[part])
	}

	// A body that breaks off every few bytes gives up too; the error
	// names the bytes still missing.
	f = &fakeObject{data: data, fail: map[int64]int{part: 100, part + 10: 100, part + 20: 100}, cut: 10}
	r = open(t, f, Options{PartSize: part, Concurrency: 1, Retries: 2})
	_, err = io.ReadAll(r)
	r.Close()
	if !errors.Is(err, io.ErrUnexpectedEOF) || !strings.Contains(err.Error(), "reading bytes 1030-1999 (3 attempts) of mem://obj") {
		t.Fatalf("err = %v", err)
	}

	// One that moves MinProgress bytes each time goes on to the end.
	const big = 4 * MinProgress
	data = randomBytes(5, 2*big)
	f = &fakeObject{data: data, fail: map[int64]int{}, cut: MinProgress}
	for off := int64(0); off < int64(len(data)); off += MinProgress {
		f.fail[off] = 1
	}
	r = open(t, f, Options{PartSize: big, Concurrency: 2, Retries: 0})
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("a range that broke off after %d bytes each time: %d bytes, %v", MinProgress, len(got), err)
	}

	// An attempt that moves MinProgress bytes starts the count anew.
	f = &fakeObject{data: data, fail: map[int64]int{0: 1, 10: 1, 10 + MinProgress: 1}, cutAt: map[int64]int{0: 10, 10: MinProgress, 10 + MinProgress: 10}}
	r = open(t, f, Options{PartSize: big, Concurrency: 1, Retries: 1})
	got, err = io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("breaks without progress on both sides of one with: %d bytes, %v (requests %v)", len(got), err, f.requests)
	}
}

// The backoff between attempts without progress doubles up to its
// maximum, and a cancelled context cuts it short.
func TestBackoff(t *testing.T) {
	b := Backoff(100*time.Millisecond, 1*time.Second)
	var got []time.Duration
	for i := 1; i <= 6; i++ {
		got = append(got, b(i))
	}
	if fmt.Sprint(got) != "[100ms 200ms 400ms 800ms 1s 1s]" {
		t.Fatalf("backoff %v", got)
	}
	f := &fakeObject{data: randomBytes(6, 10), fail: map[int64]int{0: 100}, cut: 1}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Open(ctx, Options{Size: 10, Fetch: f.fetch, PartSize: 10, Concurrency: 1, Retries: 5, Explain: explain,
		Backoff: func(int) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	if _, err := r.Read(make([]byte, 10)); !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("%v after %s", err, time.Since(start))
	}
	r.Close()
}

func TestCancel(t *testing.T) {
	data := randomBytes(7, 10_000)
	// Cancelling the context stops blocked reads at once.
	f := &fakeObject{data: data, block: true}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := Open(ctx, Options{Size: int64(len(data)), Fetch: f.fetch, PartSize: 1000, Concurrency: 4, Explain: explain})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "reading mem://obj") {
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

	// Close from another goroutine ends a Read that waits, and stops the
	// fetches, with none left behind.
	f = &fakeObject{data: data, block: true}
	r = open(t, f, Options{PartSize: 1000, Concurrency: 4})
	done = make(chan error, 1)
	go func() {
		_, err := r.Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	r.Close()
	if f.inFlight != 0 {
		t.Fatalf("%d ranges in flight after Close", f.inFlight)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("a Read that waited during Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Read went on after Close")
	}
	if _, err := r.Read(make([]byte, 1)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// A failed part fails the read (after the parts before it were handed
// out), stops the others, and every Read after says the same.
func TestFailureIsFinal(t *testing.T) {
	const part = 1000
	data := randomBytes(8, 20*part)
	errGone := errors.New("gone")
	f := &fakeObject{data: data, fail: map[int64]int{3 * part: 1}, err: errGone}
	r := open(t, f, Options{PartSize: part, Concurrency: 4})
	defer r.Close()
	got, err := io.ReadAll(r)
	if !errors.Is(err, errGone) || !bytes.Equal(got, data[:3*part]) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if _, err2 := r.Read(make([]byte, 1)); err2 != err {
		t.Fatalf("then %v", err2)
	}
	if n := f.count(); n > 3+4 {
		t.Fatalf("%d ranges requested after the failure", n)
	}
}

// The opening request's body is the first part's; other ranges are
// fetched (with what First found, here a version).
func TestFirst(t *testing.T) {
	const part = 1000
	data := randomBytes(9, 3*part+1)
	f := &fakeObject{data: data}
	version := ""
	o := Options{PartSize: part, Concurrency: 2, Explain: explain, Backoff: noPause,
		First: func(ctx context.Context, n int64) (Start, error) {
			version = "v1"
			return Start{Size: int64(len(data)), Body: io.NopCloser(bytes.NewReader(data[:n]))}, nil
		},
		Fetch: func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
			if version != "v1" {
				return nil, errors.New("not pinned")
			}
			return f.fetch(ctx, off, n)
		}}
	r, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if f.asked("0-999") || f.count() != 3 {
		t.Fatalf("requests %v", f.requests)
	}

	// A first answer without the first part's bytes has them fetched.
	f = &fakeObject{data: data}
	o.First = func(ctx context.Context, n int64) (Start, error) { return Start{Size: int64(len(data))}, nil }
	o.Fetch = f.fetch
	r, _ = Open(context.Background(), o)
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) || !f.asked("0-999") {
		t.Fatalf("%d bytes, %v, requests %v", len(got), err, f.requests)
	}
	r.Close()

	// An empty object: nothing more is asked.
	f = &fakeObject{}
	o.Fetch = f.fetch
	o.First = func(ctx context.Context, n int64) (Start, error) { return Start{}, nil }
	r, _ = Open(context.Background(), o)
	if got, err := io.ReadAll(r); err != nil || len(got) != 0 || f.count() != 0 {
		t.Fatalf("%q, %v, requests %v", got, err, f.requests)
	}
	r.Close()

	// A store that ignored the range sends the whole object: it is read
	// as it comes.
	o.First = func(ctx context.Context, n int64) (Start, error) {
		return Start{Body: io.NopCloser(bytes.NewReader(data)), Whole: true}, nil
	}
	r, _ = Open(context.Background(), o)
	if got, err := io.ReadAll(r); err != nil || !bytes.Equal(got, data) || f.count() != 0 {
		t.Fatalf("%d bytes, %v, requests %v", len(got), err, f.requests)
	}
	r.Close()

	// The opening request's error is worded, and nothing else is asked.
	o.First = func(ctx context.Context, n int64) (Start, error) { return Start{}, errors.New("no such object") }
	if _, err := Open(context.Background(), o); err == nil || err.Error() != "reading mem://obj: no such object" {
		t.Fatalf("err = %v", err)
	}

	// Close stops the opening request's body too.
	blocked := make(chan struct{})
	o.First = func(ctx context.Context, n int64) (Start, error) {
		return Start{Size: int64(len(data)), Body: &ctxBody{ctx: ctx, blocked: blocked}}, nil
	}
	o.Fetch = (&fakeObject{data: data, block: true}).fetch
	r, _ = Open(context.Background(), o)
	go r.Read(make([]byte, 1)) // the first part reads the opening answer
	<-blocked
	closed := make(chan struct{})
	go func() { r.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(2 * time.Second):
		t.Fatal("Close hangs on the opening request's body")
	}
}

// ctxBody blocks until its request's context ends, as an HTTP body does.
type ctxBody struct {
	ctx     context.Context
	blocked chan struct{}
}

func (b *ctxBody) Read(p []byte) (int, error) {
	close(b.blocked)
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}
func (b *ctxBody) Close() error { return nil }

// A store that sends more than the range asked for (it ignored the range)
// fails the read instead of handing on other bytes.
func TestLongerBody(t *testing.T) {
	data := randomBytes(10, 5000)
	f := &fakeObject{data: data, extra: 1}
	r := open(t, f, Options{PartSize: 1000, Concurrency: 1, Retries: 3})
	defer r.Close()
	got, err := io.ReadAll(r)
	if err == nil || !strings.Contains(err.Error(), "reading bytes 0-999 of mem://obj: the store sent more bytes than were asked for") || len(got) != 0 {
		t.Fatalf("%d bytes, %v", len(got), err)
	}
	if f.count() > 1 {
		t.Fatalf("requests %v: it was retried", f.requests)
	}
}

func TestTotalSize(t *testing.T) {
	for v, want := range map[string]int64{"bytes 0-99/1000": 1000, "bytes 0-0/1": 1, "bytes */0": 0, " bytes 0-1023/4096 ": 4096} {
		if n, ok := TotalSize(v); !ok || n != want {
			t.Errorf("TotalSize(%q) = %d %v", v, n, ok)
		}
	}
	for _, v := range []string{"", "0-99/1000", "bytes 0-99/*", "bytes 0-99/-1"} {
		if _, ok := TotalSize(v); ok {
			t.Errorf("TotalSize(%q) accepted", v)
		}
	}
}

func TestOptions(t *testing.T) {
	fetch := (&fakeObject{}).fetch
	for _, o := range []Options{
		{PartSize: 10, Concurrency: 1},
		{Fetch: fetch, Concurrency: 1},
		{Fetch: fetch, PartSize: 10},
		{Fetch: fetch, PartSize: 10, Concurrency: 1, Retries: -1},
		{Fetch: fetch, PartSize: 10, Concurrency: 1, Size: -1},
	} {
		if _, err := Open(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

// memFile is an io.WriterAt in memory that records the writes it got and
// fails the one that holds byte failAt (when set).
type memFile struct {
	mu      sync.Mutex
	b       []byte
	writes  int
	largest int
	failAt  int64
}

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failAt > 0 && off <= m.failAt && m.failAt < off+int64(len(p)) {
		return 0, errors.New("no space left on device")
	}
	if need := off + int64(len(p)); need > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, need-int64(len(m.b)))...)
	}
	copy(m.b[off:], p)
	m.writes++
	m.largest = max(m.largest, len(p))
	return len(p), nil
}

// WriteAtTo puts every range where it belongs, in parallel, through
// buffers of at most fillBuffer, resuming ranges that broke off; the first
// range comes from the opening answer.
func TestWriteAtTo(t *testing.T) {
	const part = 3 << 20
	data := randomBytes(11, 5*part+12345)
	f := &fakeObject{data: data, fail: map[int64]int{part: 1, 3 * part: 1}, cut: 1 << 20}
	// Ranges 1 and 2 answer only once both were asked: WriteAtTo that did
	// not keep them in flight together would fail here.
	var together sync.WaitGroup
	together.Add(2)
	both := make(chan struct{})
	go func() { together.Wait(); close(both) }()
	fetch := func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
		if off == part || off == 2*part {
			together.Done()
			select {
			case <-both:
			case <-time.After(5 * time.Second):
				return nil, errors.New("ranges 1 and 2 were not in flight together")
			}
		}
		return f.fetch(ctx, off, n)
	}
	o := Options{PartSize: part, Concurrency: 3, Retries: 1, Explain: explain, Backoff: noPause, Fetch: fetch,
		First: func(ctx context.Context, n int64) (Start, error) {
			return Start{Size: int64(len(data)), Body: io.NopCloser(bytes.NewReader(data[:n]))}, nil
		}}
	r, err := Open(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var m memFile
	n, err := r.(*Reader).WriteAtTo(&m)
	if err != nil || n != int64(len(data)) || !bytes.Equal(m.b, data) {
		t.Fatalf("wrote %d bytes (%d equal: %v), %v", n, len(m.b), bytes.Equal(m.b, data), err)
	}
	if m.largest > fillBuffer {
		t.Errorf("a write of %d bytes: ranges should move through %d-byte buffers", m.largest, fillBuffer)
	}
	if f.asked("0-3145727") {
		t.Errorf("the first range was fetched again: %v", f.requests)
	}
	// Two ranges broke off after 1 MiB: each was asked again from its
	// first missing byte.
	for _, want := range []string{fmt.Sprintf("%d-%d", part+1<<20, 2*part-1), fmt.Sprintf("%d-%d", 3*part+1<<20, 4*part-1)} {
		if !f.asked(want) {
			t.Errorf("no request %s among %v", want, f.requests)
		}
	}
	if f.maxInFlight > 3 {
		t.Errorf("%d requests at once; concurrency is 3", f.maxInFlight)
	}

	// Not after a Read.
	r2 := open(t, &fakeObject{data: data}, Options{PartSize: part, Concurrency: 2})
	defer r2.Close()
	r2.Read(make([]byte, 1))
	if _, err := r2.(*Reader).WriteAtTo(&memFile{}); err == nil {
		t.Error("WriteAtTo after a Read succeeded")
	}

	// An empty object writes nothing.
	r3, err := Open(context.Background(), Options{PartSize: part, Concurrency: 2, Fetch: f.fetch,
		First: func(ctx context.Context, n int64) (Start, error) { return Start{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Close()
	if n, err := r3.(*Reader).WriteAtTo(&memFile{}); n != 0 || err != nil {
		t.Errorf("empty object: %d, %v", n, err)
	}
}

// A failed write fails WriteAtTo at once, with where it failed, without
// asking the range again; no range starts after it, and only whole
// ranges count as written.
func TestWriteAtToWriteFails(t *testing.T) {
	const part = 1 << 20
	data := randomBytes(12, 40*part)
	for _, conc := range []int{1, 2} {
		f := &fakeObject{data: data}
		r := open(t, f, Options{PartSize: part, Concurrency: conc, Retries: 3, Explain: explain, Backoff: noPause})
		n, err := r.(*Reader).WriteAtTo(&memFile{failAt: 2*part + 10})
		r.Close()
		want := fmt.Sprintf("writing bytes %d-%d: no space left on device", 2*part, 2*part+fillBuffer-1)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("concurrency %d: err = %v", conc, err)
		}
		if strings.Count(strings.Join(f.requests, " "), "2097152-") != 1 {
			t.Errorf("concurrency %d: the range whose write failed was not asked exactly once: %v", conc, f.requests)
		}
		if n%part != 0 || n > int64(len(data))-part {
			t.Errorf("concurrency %d: %d bytes reported written: not whole ranges without the failed one", conc, n)
		}
		switch {
		case conc == 1 && (f.count() != 3 || n != 2*part):
			// One at a time, the order is fixed: ranges 0 and 1, then
			// the failure, then nothing.
			t.Errorf("one range at a time: %d bytes written, requests %v", n, f.requests)
		case f.count() == 40:
			t.Errorf("concurrency %d: every range was asked after the failure: %v", conc, f.requests)
		}
	}
}

// returnsWithin reports whether f returns within d.
func returnsWithin(d time.Duration, f func()) bool {
	returned := make(chan struct{})
	go func() {
		f()
		close(returned)
	}()
	select {
	case <-returned:
		return true
	case <-time.After(d):
		return false
	}
}

// vanishingAt is a memFile whose write at off never returns.
type vanishingAt struct {
	memFile
	off int64
}

func (v *vanishingAt) WriteAt(p []byte, off int64) (int, error) {
	if off == v.off {
		runtime.Goexit()
	}
	return v.memFile.WriteAt(p, off)
}

// A range whose fetch or write does not return (a panic, which ends the
// process a moment later; here runtime.Goexit, which runs the same
// deferred calls without ending it) must not look arrived: Read would
// hand on a part of zeros, WriteAtTo report a short object as written.
func TestVanishedRangeIsNotDone(t *testing.T) {
	const part = 1 << 20
	data := randomBytes(13, 4*part)
	f := &fakeObject{data: data}
	fetch := func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
		if off == 2*part {
			runtime.Goexit()
		}
		return f.fetch(ctx, off, n)
	}
	r, err := Open(context.Background(), Options{Size: int64(len(data)), PartSize: part, Concurrency: 2, Fetch: fetch, Backoff: noPause, Explain: explain})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	if returnsWithin(300*time.Millisecond, func() { got, _ = io.ReadAll(r) }) {
		t.Fatalf("Read returned %d bytes though range 2 never arrived", len(got))
	}

	// A reader of its own: the first one's ReadAll never returns, and still
	// reads r.
	r2 := open(t, &fakeObject{data: data}, Options{PartSize: part, Concurrency: 2})
	var n int64
	if returnsWithin(300*time.Millisecond, func() { n, err = r2.(*Reader).WriteAtTo(&vanishingAt{off: 2 * part}) }) {
		t.Fatalf("WriteAtTo returned %d, %v though the write at range 2 never did", n, err)
	}
}

// Memory bounds the buffers a reader of an object of at most maxObject
// bytes actually holds: every part in flight once it has read one byte.
func TestMemoryBoundsTheBuffers(t *testing.T) {
	const part = 1000
	for _, size := range []int{1, part / 3, part - 1, part, part + 1, 3*part + 7, 40 * part} {
		for _, conc := range []int{1, 4} {
			f := &fakeObject{data: randomBytes(uint64(size), size)}
			r := open(t, f, Options{PartSize: part, Concurrency: conc})
			if _, err := io.ReadFull(r, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
			rr := r.(*Reader)
			rr.mu.Lock()
			var held int64
			for _, p := range append(rr.queue, rr.cur) {
				if p != nil {
					held += int64(cap(p.buf))
				}
			}
			rr.mu.Unlock()
			r.Close()
			est := Memory(part, conc, int64(size))
			if held == 0 || held > est {
				t.Errorf("size %d conc %d: the reader holds %d bytes of buffers, Memory says %d", size, conc, held, est)
			}
			if big := Memory(part, conc, 1<<40); est > big || (size < part && est != int64(size)) {
				t.Errorf("size %d conc %d: Memory %d (any size: %d)", size, conc, est, big)
			}
		}
	}
}
