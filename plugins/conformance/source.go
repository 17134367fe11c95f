package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Source says how to make the source under test.
type Source struct {
	// New returns a source that yields exactly these streams.
	New func(t *testing.T, streams map[string][]byte) sdk.Source
	// OneStream is true for sources that yield a single stream (a
	// command's output): the many-streams case is skipped.
	OneStream bool
	// Endless returns a source and the name of a stream that never ends,
	// for the cancellation case.
	Endless func(t *testing.T) (sdk.Source, string)
	// Failing returns a source configured with secret (in a secret
	// attribute) whose stream named by the second result fails; nil when
	// the source has no secret attribute.
	Failing func(t *testing.T, secret string) (sdk.Source, string)
}

func data(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 99))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func readAll(t *testing.T, src sdk.Source, name string) []byte {
	t.Helper()
	rc, err := src.Open(context.Background(), name)
	if err != nil {
		t.Fatalf("Open(%q): %v", name, err)
	}
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading %q: %v", name, err)
	}
	if err := rc.Close(); err != nil {
		t.Fatalf("closing %q: %v", name, err)
	}
	return b
}

// RunSource runs the suite on a source.
func RunSource(t *testing.T, s Source) {
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", []byte{}},
		{"one byte", []byte{7}},
		{"many chunks", data(1, 5<<20+17)},
	} {
		t.Run(tc.name, func(t *testing.T) { sourceOneStream(t, s, tc.data) })
	}
	t.Run("ranges", func(t *testing.T) { sourceRanges(t, s) })
	t.Run("many streams at once", func(t *testing.T) { sourceManyStreams(t, s) })
	t.Run("missing stream", func(t *testing.T) { sourceMissing(t, s) })
	t.Run("cancellation", func(t *testing.T) { sourceCancellation(t, s) })
	t.Run("secrets stay out of errors", func(t *testing.T) { sourceSecrets(t, s) })
}

// sourceOneStream lists a source of one stream holding b, checks its name
// and size, and reads b back.
func sourceOneStream(t *testing.T, s Source, b []byte) {
	src := s.New(t, map[string][]byte{"stream-1": b})
	infos, err := src.Streams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Name != "stream-1" {
		t.Fatalf("Streams() = %+v, want one stream named stream-1", infos)
	}
	if sz := infos[0].Size; sz != -1 && sz != int64(len(b)) {
		t.Fatalf("size %d, want %d or -1", sz, len(b))
	}
	if got := readAll(t, src, "stream-1"); !bytes.Equal(got, b) {
		t.Fatalf("read %d bytes, want %d", len(got), len(b))
	}
}

// sourceRanges reads parts of a stream with sdk.OpenRange (the source's
// own OpenRange, or skipping to the part): exactly the bytes asked, and
// io.ErrUnexpectedEOF for a part past the end.
func sourceRanges(t *testing.T, s Source) {
	b := data(2, 3<<20+5)
	src := s.New(t, map[string][]byte{"stream-1": b})
	if _, err := src.Streams(context.Background()); err != nil {
		t.Fatal(err)
	}
	read := func(off, n int64) ([]byte, error) {
		rc, err := sdk.OpenRange(context.Background(), src, "stream-1", off, n)
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	for _, r := range [][2]int64{{0, 1}, {1000, 70_000}, {2 << 20, 1 << 20}, {int64(len(b)) - 5, 5}} {
		got, err := read(r[0], r[1])
		if err != nil || !bytes.Equal(got, b[r[0]:r[0]+r[1]]) {
			t.Errorf("%d bytes at %d: %d bytes back, %v", r[1], r[0], len(got), err)
		}
	}
	if got, err := read(int64(len(b))-5, 10); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("10 bytes at 5 before the end: %d bytes back, %v, want io.ErrUnexpectedEOF", len(got), err)
	}
}

// sourceManyStreams reads 16 streams of different sizes at once, each
// from its own goroutine.
func sourceManyStreams(t *testing.T, s Source) {
	if s.OneStream {
		t.Skip("this source yields one stream")
	}
	want := map[string][]byte{}
	for i := 0; i < 16; i++ {
		want[fmt.Sprintf("dir/s%02d", i)] = data(uint64(i), 100_000*i)
	}
	src := s.New(t, want)
	infos, err := src.Streams(context.Background())
	if err != nil || len(infos) != len(want) {
		t.Fatalf("Streams: %d streams, %v", len(infos), err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(want))
	for name, b := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rc, err := src.Open(context.Background(), name)
			if err != nil {
				errs <- err
				return
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, b) {
				errs <- fmt.Errorf("%s: %d bytes, %v", name, len(got), err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// sourceMissing opens a stream the source does not have: the error wraps
// sdk.ErrNotFound.
func sourceMissing(t *testing.T, s Source) {
	src := s.New(t, map[string][]byte{"here": {1}})
	if rc, err := src.Open(context.Background(), "not-here"); !errors.Is(err, sdk.ErrNotFound) {
		if rc != nil {
			rc.Close()
		}
		t.Fatalf("Open of a missing stream: %v, want an error wrapping sdk.ErrNotFound", err)
	}
}

// sourceCancellation cancels the context of an endless stream: reads end
// and Close returns, each within 5 s.
func sourceCancellation(t *testing.T, s Source) {
	if s.Endless == nil {
		t.Skip("no endless stream for this source")
	}
	src, name := s.Endless(t)
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := src.Open(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	if _, err := io.ReadFull(rc, buf); err != nil {
		t.Fatalf("reading the endless stream: %v", err)
	}
	cancel()
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := rc.Read(buf); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case <-done: //nolint:errcheck // any error ends the reads, which is all this asks
	case <-time.After(5 * time.Second):
		t.Fatal("reads went on for 5 s after the context was cancelled")
	}
	closed := make(chan struct{})
	go func() { rc.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close hangs after cancellation")
	}
}

// sourceSecrets makes a source configured with a secret fail: no error it
// returns repeats the secret.
func sourceSecrets(t *testing.T, s Source) {
	if s.Failing == nil {
		t.Skip("this source has no secret attribute")
	}
	const secret = "s3cr3t-p4ssw0rd-for-conformance"
	src, name := s.Failing(t, secret)
	var msgs []string
	rc, err := src.Open(context.Background(), name)
	if err != nil {
		msgs = append(msgs, err.Error())
	} else {
		_, err := io.ReadAll(rc)
		if err != nil {
			msgs = append(msgs, err.Error())
		}
		if err := rc.Close(); err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 0 {
		t.Fatal("the failing source did not fail")
	}
	for _, m := range msgs {
		if strings.Contains(m, secret) {
			t.Fatalf("an error repeats the secret: %s", m)
		}
	}
}
