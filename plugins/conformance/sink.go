package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Sink says how to make the sink under test and how to see what it stored.
type Sink struct {
	// New returns a sink writing to a fresh place, and that place.
	New func(t *testing.T) (sdk.Sink, Store)
	// Slow returns a sink that accepts bytes slowly (well under 10 MB/s),
	// for the backpressure case; nil to skip it.
	Slow func(t *testing.T) sdk.Sink
	// Failing returns a sink configured with secret (in a secret
	// attribute) whose objects fail; nil when the sink has no secret
	// attribute.
	Failing func(t *testing.T, secret string) sdk.Sink
	// Exclusive is true when the sink's schema says ExclusiveCreate: the
	// suite then checks that of writers racing for one key with
	// Object.Exclusive exactly one commits, and the others get ErrExists.
	Exclusive bool
}

// Store is where a sink under test writes.
type Store interface {
	// Key is the object key to use for an object called name.
	Key(name string) string
	// Read returns the committed object at key, if there is one.
	Read(key string) ([]byte, bool)
}

func write(ctx context.Context, s sdk.Sink, key string, b []byte) (sdk.ObjectWriter, error) {
	return writeObject(ctx, s, sdk.Object{Key: key, Stream: key, Size: int64(len(b))}, b)
}

func writeObject(ctx context.Context, s sdk.Sink, obj sdk.Object, b []byte) (sdk.ObjectWriter, error) {
	w, err := s.Create(ctx, obj)
	if err != nil {
		return nil, err
	}
	for len(b) > 0 {
		n := min(len(b), 3<<20)
		if _, err := w.Write(b[:n]); err != nil {
			w.Abort(context.Background())
			return nil, err
		}
		b = b[n:]
	}
	return w, nil
}

// RunSink runs the suite on a sink.
func RunSink(t *testing.T, s Sink) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", []byte{}},
		{"one byte", []byte{9}},
		{"many chunks", data(2, 7<<20+3)},
	} {
		t.Run(tc.name, func(t *testing.T) { sinkRoundTrip(t, s, tc.data) })
	}
	t.Run("many objects at once", func(t *testing.T) { sinkManyObjects(t, s) })
	if s.Exclusive {
		t.Run("exclusive create: one of racing writers commits", func(t *testing.T) {
			exclusive(t, s)
		})
	}
	t.Run("abort mid-stream leaves nothing", func(t *testing.T) { sinkAbort(t, s) })
	t.Run("cancellation", func(t *testing.T) { sinkCancellation(t, s) })
	t.Run("slow sink holds the writer back", func(t *testing.T) { sinkBackpressure(t, s) })
	t.Run("secrets stay out of errors", func(t *testing.T) { sinkSecrets(t, s) })
}

// sinkRoundTrip writes b as one object: it is invisible until Commit,
// stored whole after it, and an Abort after Commit leaves it there.
func sinkRoundTrip(t *testing.T, s Sink, b []byte) {
	snk, store := s.New(t)
	key := store.Key("obj")
	w, err := write(context.Background(), snk, key, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Read(key); ok {
		t.Fatal("the object is visible before Commit")
	}
	if err := w.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	got, ok := store.Read(key)
	if !ok || !bytes.Equal(got, b) {
		t.Fatalf("stored %d bytes (present %v), want %d", len(got), ok, len(b))
	}
	if err := w.Abort(context.Background()); err != nil {
		t.Fatalf("Abort after Commit: %v", err)
	}
	if _, ok := store.Read(key); !ok {
		t.Fatal("Abort after Commit removed the object")
	}
}

// sinkManyObjects writes and commits 16 objects of different sizes at
// once, each from its own goroutine.
func sinkManyObjects(t *testing.T, s Sink) {
	snk, store := s.New(t)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, b := store.Key(fmt.Sprintf("o%02d", i)), data(uint64(i), 200_000*i)
			w, err := write(context.Background(), snk, key, b)
			if err == nil {
				err = w.Commit(context.Background())
			}
			if err != nil {
				errs <- err
				return
			}
			if got, ok := store.Read(key); !ok || !bytes.Equal(got, b) {
				errs <- fmt.Errorf("%s: %d bytes stored, want %d", key, len(got), len(b))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// sinkAbort aborts an object mid-stream: nothing is stored, and a Commit
// after the Abort does not store it either.
func sinkAbort(t *testing.T, s Sink) {
	snk, store := s.New(t)
	key := store.Key("aborted")
	w, err := write(context.Background(), snk, key, data(3, 3<<20))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Abort(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok := store.Read(key); ok {
		t.Fatal("an aborted object was committed")
	}
	if err := w.Commit(context.Background()); err == nil {
		if _, ok := store.Read(key); ok {
			t.Fatal("Commit after Abort committed the object")
		}
	}
}

// sinkCancellation cancels an object's context mid-stream: writes stop
// within 5 s and the object is not stored.
func sinkCancellation(t *testing.T, s Sink) {
	snk, store := s.New(t)
	key := store.Key("cancelled")
	ctx, cancel := context.WithCancel(context.Background())
	w, err := write(ctx, snk, key, data(4, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	start := time.Now()
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		_, werr = w.Write(data(5, 1<<20))
	}
	cerr := w.Commit(context.Background())
	if werr == nil && cerr == nil {
		if _, ok := store.Read(key); ok {
			t.Fatal("an object whose context was cancelled was committed")
		}
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("writes went on for 5 s after the context was cancelled")
	}
	w.Abort(context.Background())
	if _, ok := store.Read(key); ok {
		t.Fatal("an object whose context was cancelled is stored")
	}
}

// sinkBackpressure writes to a slow sink for 1.5 s: what it accepts
// stays bounded instead of growing with the input.
func sinkBackpressure(t *testing.T, s Sink) {
	if s.Slow == nil {
		t.Skip("no slow variant of this sink")
	}
	snk := s.Slow(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := snk.Create(ctx, sdk.Object{Key: "slow", Stream: "slow", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var accepted int64
	go func() {
		chunk := make([]byte, 256<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				return
			}
			mu.Lock()
			accepted += int64(len(chunk))
			mu.Unlock()
		}
	}()
	time.Sleep(1500 * time.Millisecond)
	mu.Lock()
	n := accepted
	mu.Unlock()
	cancel()
	w.Abort(context.Background())
	// The slow sink takes well under 15 MB in 1.5 s; what it accepted
	// beyond is buffering, which must stay bounded (pipes, flow-control
	// windows), not grow with the input.
	if n > 64<<20 {
		t.Fatalf("a slow sink accepted %d MiB in 1.5 s: it buffers instead of pushing back", n>>20)
	}
}

// sinkSecrets makes a sink configured with a secret fail: no error it
// returns repeats the secret.
func sinkSecrets(t *testing.T, s Sink) {
	if s.Failing == nil {
		t.Skip("this sink has no secret attribute")
	}
	const secret = "s3cr3t-p4ssw0rd-for-conformance"
	snk := s.Failing(t, secret)
	var msgs []string
	w, err := snk.Create(context.Background(), sdk.Object{Key: "f", Stream: "f", Size: -1})
	if err != nil {
		msgs = append(msgs, err.Error())
	} else {
		if _, err := w.Write([]byte("data")); err != nil {
			msgs = append(msgs, err.Error())
		} else if err := w.Commit(context.Background()); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 0 {
		t.Fatal("the failing sink did not fail")
	}
	for _, m := range msgs {
		if strings.Contains(m, secret) {
			t.Fatalf("an error repeats the secret: %s", m)
		}
	}
}

// exclusive races writers of different bytes for one key, each created
// before any commits: exactly one commits, the others fail with
// ErrExists, the winner's bytes stay, and a later writer, small or large,
// fails the same way.
func exclusive(t *testing.T, s Sink) {
	snk, store := s.New(t)
	key := store.Key("claimed")
	const writers = 4
	ws := make([]sdk.ObjectWriter, writers)
	for i := range ws {
		b := []byte(fmt.Sprintf("writer %d", i))
		w, err := writeObject(context.Background(), snk, sdk.Object{Key: key, Stream: "claimed", Size: int64(len(b)), MaxSize: int64(len(b)), Exclusive: true}, b)
		if err != nil {
			t.Fatalf("writer %d: %v", i, err)
		}
		ws[i] = w
	}
	errs := make([]error, writers)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = w.Commit(context.Background())
		}()
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Errorf("writers %d and %d both committed %s", winner, i, key)
		case err == nil:
			winner = i
		case !errors.Is(err, sdk.ErrExists):
			t.Errorf("writer %d lost with %v, not an error wrapping sdk.ErrExists", i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("no writer committed: %v", errs)
	}
	want := fmt.Sprintf("writer %d", winner)
	if got, ok := store.Read(key); !ok || string(got) != want {
		t.Fatalf("stored %q (present %v), want the winner's %q", got, ok, want)
	}
	for _, size := range []int{3, 7<<20 + 3} {
		b := data(9, size)
		w, err := writeObject(context.Background(), snk, sdk.Object{Key: key, Stream: "claimed", Size: int64(size), MaxSize: int64(size), Exclusive: true}, b)
		if err == nil {
			err = w.Commit(context.Background())
		}
		if !errors.Is(err, sdk.ErrExists) {
			t.Errorf("a later writer of %d bytes: %v, want an error wrapping sdk.ErrExists", size, err)
		}
		if got, _ := store.Read(key); string(got) != want {
			t.Fatalf("a later writer of %d bytes replaced the object", size)
		}
	}
}
