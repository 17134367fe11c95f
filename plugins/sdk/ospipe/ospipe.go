// Package ospipe makes the OS pipes that carry a stream between a program
// a plugin runs (pg_dump, pg_restore) and pipe, which reads or writes the
// pipe itself, and reads and writes such pipes in batches.
//
// A program like pg_dump writes 4 KiB at a time. Read through the Go
// runtime's poller, every one of those writes woke a poller thread: in
// pipe, which read each 4-9 KiB as it came, and in the plugin too, whose
// poller had the read end registered though it never read it. By perf, a
// custom-format backup of a 890 MiB dump made 350-380 thousand context
// switches and 6.6-8.1 s of system time, against the shell pipeline's 180
// thousand and 3 s (pg_dump | zstd | mc). Here a pipe's ends stay out of
// the poller, and Reader waits a moment after a read that found little,
// so a slow writer's small writes gather into one read instead of waking
// the reader each time. Writer is the same for the other direction: a
// restore's input to pg_restore, which reads 4 KiB at a time.
package ospipe

import (
	"context"
	"errors"
	"io"
	"os"
	"sync/atomic"
	"time"
)

// Size is the buffer asked for each pipe (Linux's default is 64 KiB).
const Size = 1 << 20

// Batch and Pause: a read that returned less than Batch bytes, and less
// than it asked for, means the writer is slower than the reader, which
// then waits Pause before reading again (a reader that asks for 64 KiB at
// a time, as pgx's COPY does, and gets it is not slowed). At 60 MB/s (pg_dump's pace here) a read then moves ~120 KB
// instead of one or two writes; a writer that fills the pipe within Pause
// blocks until the read, which takes a whole pipe at once.
const (
	Batch = 128 << 10
	Pause = 2 * time.Millisecond
)

// poll is how long a read waits for data before it looks at its context
// again.
const poll = 100 * time.Millisecond

// Reader reads a pipe's read end made by New (or any pipe or FIFO) in
// batches, until ctx ends. It must be the end's only reader: it polls,
// then reads, and a read another reader emptied the pipe for would wait
// past ctx.
type Reader struct {
	ending
	ctx   context.Context
	f     *os.File
	short bool // the last read got less than Batch
}

var _ io.Reader = (*Reader)(nil)

// NewReader returns a Reader of f that gives up, with ctx's cause, once
// ctx ends.
func NewReader(ctx context.Context, f *os.File) *Reader { return &Reader{ctx: ctx, f: f} }

// Writer writes a pipe's write end (one made by New, or any pipe) in
// batches, until ctx ends: when the pipe is full it waits until the reader
// has taken some, and when that is less than Batch (a slow reader), Pause
// more, before writing again; a fast reader (a plugin's pump, which takes
// the whole pipe at once) is not kept waiting. A writer blocked
// on a full pipe is woken by every read that frees room; pg_restore reads
// 4 KiB at a time, so pipe wrote 4 KiB per wakeup, and the plugin's poller
// woke too.
type Writer struct {
	ending
	ctx  context.Context
	f    *os.File
	set  bool // the descriptor was made non-blocking
	size int  // the pipe's buffer, once set
}

var _ io.Writer = (*Writer)(nil)

// NewWriter returns a Writer of f that gives up, with ctx's cause, once
// ctx ends. It makes f's descriptor non-blocking, for every holder of
// that open pipe end: write it through the Writer only.
func NewWriter(ctx context.Context, f *os.File) *Writer { return &Writer{ctx: ctx, f: f} }

// ErrClosed is what a Read or Write in progress returns when its Reader or
// Writer is closed meanwhile.
var ErrClosed = errors.New("the pipe was closed")

// ending is a Reader's or Writer's own end, beside its context's.
type ending struct{ closed atomic.Bool }

// stopped is why a Read or Write must stop: Close, or the context.
func (e *ending) stopped(ctx context.Context) error {
	if e.closed.Load() {
		return ErrClosed
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// Close stops a Read in progress, which holds the descriptor (a Close of
// a pollable file waits for it, within 100 ms of this), and closes the
// file.
func (r *Reader) Close() error {
	r.closed.Store(true)
	return r.f.Close()
}

// Close stops a Write in progress, as Reader's Close does, and closes the
// file.
func (w *Writer) Close() error {
	w.closed.Store(true)
	return w.f.Close()
}

// IsPipe reports whether f is a pipe or FIFO.
func IsPipe(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}
