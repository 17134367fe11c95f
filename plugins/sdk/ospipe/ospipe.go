// Package ospipe makes the OS pipes that carry a stream between a program
// a plugin runs (pg_dump, say) or a plugin's goroutine and pipe, which
// reads the pipe itself, and reads such a pipe in batches.
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
// the reader each time.
package ospipe

import (
	"context"
	"io"
	"os"
	"time"
)

// Size is the buffer asked for each pipe (Linux's default is 64 KiB).
const Size = 1 << 20

// Batch and Pause: a read that returned less than Batch bytes means the
// writer is slower than the reader, which then waits Pause before reading
// again. At 60 MB/s (pg_dump's pace here) a read then moves ~120 KB
// instead of one or two writes; a writer that fills the pipe within Pause
// blocks until the read, which takes a whole pipe at once.
const (
	Batch = 128 << 10
	Pause = 2 * time.Millisecond
)

// poll is how long a read waits for data before it looks at its context
// again.
const poll = 100 * time.Millisecond

// Reader reads a pipe's read end made by New (or any pipe, FIFO or file
// outside the poller) in batches, until ctx ends.
type Reader struct {
	ctx   context.Context
	f     *os.File
	short bool // the last read got less than Batch
}

var _ io.Reader = (*Reader)(nil)

// NewReader returns a Reader of f that gives up, with ctx's cause, once
// ctx ends.
func NewReader(ctx context.Context, f *os.File) *Reader { return &Reader{ctx: ctx, f: f} }

// IsPipe reports whether f is a pipe or FIFO.
func IsPipe(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeNamedPipe != 0
}
