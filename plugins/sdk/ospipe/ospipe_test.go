//go:build linux

package ospipe

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestNew(t *testing.T) {
	r, w := newPipe(t)
	// Not Fd(), which would make the descriptor blocking.
	fdOf := func(f *os.File) (fd uintptr) {
		rc, err := f.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(d uintptr) { fd = d })
		return fd
	}
	for _, f := range []struct {
		name string
		fd   uintptr
	}{{"read end", fdOf(r)}, {"write end", fdOf(w)}} {
		fl, err := unix.FcntlInt(f.fd, unix.F_GETFL, 0)
		if err != nil {
			t.Fatal(err)
		}
		// A non-blocking descriptor is what os.NewFile registers with
		// the poller.
		if fl&unix.O_NONBLOCK != 0 {
			t.Errorf("%s is non-blocking", f.name)
		}
		if fd, err := unix.FcntlInt(f.fd, unix.F_GETFD, 0); err != nil || fd&unix.FD_CLOEXEC == 0 {
			t.Errorf("%s is inherited by programs started later", f.name)
		}
	}
	if n, err := unix.FcntlInt(fdOf(r), unix.F_GETPIPE_SZ, 0); err != nil || n != Size {
		t.Errorf("pipe buffer %d, %v; want %d", n, err, Size)
	}
	if !IsPipe(r) {
		t.Error("IsPipe of a pipe is false")
	}
}

// Every byte arrives, however the writer cuts them, then EOF.
func TestReaderReadsAll(t *testing.T) {
	r, w := newPipe(t)
	want := make([]byte, 3<<20+17)
	for i := range want {
		want[i] = byte(i % 253)
	}
	go func() {
		for off := 0; off < len(want); off += 4096 {
			w.Write(want[off:min(off+4096, len(want))])
		}
		w.Close()
	}()
	got, err := io.ReadAll(NewReader(context.Background(), r))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %d bytes (equal %v), %v", len(got), bytes.Equal(got, want), err)
	}
}

// After a read that found less than Batch, the next read waits Pause
// first, even when the pipe holds bytes already: the writer's next small
// writes gather meanwhile.
func TestReaderPausesAfterLittle(t *testing.T) {
	r, w := newPipe(t)
	rd := NewReader(context.Background(), r)
	buf := make([]byte, Size)
	w.Write(make([]byte, 100))
	if n, err := rd.Read(buf); n != 100 || err != nil {
		t.Fatalf("first read: %d, %v", n, err)
	}
	w.Write(make([]byte, 100))
	start := time.Now()
	if n, err := rd.Read(buf); n != 100 || err != nil {
		t.Fatalf("second read: %d, %v", n, err)
	}
	if took := time.Since(start); took < Pause {
		t.Errorf("the read after a short one took %s, no pause", took)
	}
	// A read that got all it asked for (pgx asks 64 KiB at a time) is
	// not short, however small: the writer keeps up.
	w.Write(make([]byte, 300))
	if n, err := rd.Read(buf[:300]); n != 300 || err != nil || rd.short {
		t.Errorf("a read of all it asked for: %d, %v, short %v", n, err, rd.short)
	}
}

// A read waiting for a writer that writes nothing returns once its
// context ends, with the context's cause.
func TestReaderCancel(t *testing.T) {
	r, _ := newPipe(t) // the write end stays open: no EOF
	why := errors.New("the run was stopped")
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := NewReader(ctx, r).Read(make([]byte, 10))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel(why)
	select {
	case err := <-done:
		if !errors.Is(err, why) {
			t.Fatalf("read ended with %v, want %v", err, why)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the read did not end with its context")
	}
}

// Every byte reaches a reader that takes 4 KiB at a time, as pg_restore
// does, whatever the writer's pieces.
func TestWriterWritesAll(t *testing.T) {
	r, w := newPipe(t)
	want := make([]byte, 5<<20+3)
	for i := range want {
		want[i] = byte(i % 241)
	}
	got := make(chan []byte, 1)
	go func() {
		var b bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				got <- b.Bytes()
				return
			}
		}
	}()
	wr := NewWriter(context.Background(), w)
	for _, piece := range [][]byte{want[:3<<20], want[3<<20 : 3<<20+1], want[3<<20+1:]} {
		if n, err := wr.Write(piece); n != len(piece) || err != nil {
			t.Fatalf("wrote %d of %d: %v", n, len(piece), err)
		}
	}
	w.Close()
	if b := <-got; !bytes.Equal(b, want) {
		t.Fatalf("the reader got %d bytes (equal %v), want %d", len(b), bytes.Equal(b, want), len(want))
	}
}

// A write to a pipe whose reader is gone fails with EPIPE; one to a full
// pipe nobody reads returns once its context ends, with the cause.
func TestWriterFails(t *testing.T) {
	r, w := newPipe(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	why := errors.New("the run was stopped")
	done := make(chan error, 1)
	go func() {
		_, err := NewWriter(ctx, w).Write(make([]byte, 2*Size))
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel(why)
	select {
	case err := <-done:
		if !errors.Is(err, why) {
			t.Fatalf("the write ended with %v, want %v", err, why)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write did not end with its context")
	}

	r.Close()
	if _, err := NewWriter(context.Background(), w).Write([]byte("x")); !errors.Is(err, unix.EPIPE) {
		t.Fatalf("a write without a reader: %v, want EPIPE", err)
	}
}

// The room a Writer waits for fits the pipe: half of a 64 KiB pipe (the
// size of an os.Pipe), else it would pause before every write.
func TestWriterBatchFitsThePipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	wr := NewWriter(context.Background(), w)
	if _, err := wr.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if wr.size != 64<<10 || wr.batch() != 32<<10 {
		t.Errorf("a %d-byte pipe waits for %d bytes of room", wr.size, wr.batch())
	}
	_, w2 := newPipe(t)
	wr = NewWriter(context.Background(), w2)
	if _, err := wr.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if wr.batch() != Batch {
		t.Errorf("a %d-byte pipe waits for %d bytes of room, want %d", wr.size, wr.batch(), Batch)
	}
}

// newPipe is New, closed when the test ends.
func newPipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}
