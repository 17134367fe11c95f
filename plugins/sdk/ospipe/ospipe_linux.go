package ospipe

import (
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// New returns a pipe with a buffer of Size (or what the system grants)
// whose ends are not registered with this process's poller: blocking
// descriptors, for a program, for another process (handed over) or for
// Reader. A goroutine writing the write end blocks in the write.
func New() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	_, _ = unix.FcntlInt(uintptr(fds[0]), unix.F_SETPIPE_SZ, Size) // less is fine (see Grow)
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

// Read reads what the pipe holds, up to len(p), after waiting Pause when
// the previous read found little. It waits for data without the poller, in
// poll(2), looking at its context (and Close) every 100 ms; a read whose
// context ended returns the context's cause, one closed ErrClosed. At the
// pipe's end it returns io.EOF.
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.short {
		t := time.NewTimer(Pause)
		select {
		case <-t.C:
		case <-r.ctx.Done():
			t.Stop()
		}
	}
	n, err := onFD(r.f, false, func(fd int) (int, error) { return r.read(fd, p) })
	r.short = n < min(len(p), Batch) // a read of less than it asked for
	return n, err
}

// onFD runs op on f's descriptor inside RawConn's Read (or Write), where
// it stays open: a Close of a pollable file waits for op, and one of
// another file closes the descriptor only after it: the Reader's or Writer's
// Close stops op first.
func onFD(f *os.File, write bool, op func(fd int) (int, error)) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var opErr error
	run := func(fd uintptr) bool {
		n, opErr = op(int(fd))
		return true
	}
	if write {
		err = rc.Write(run)
	} else {
		err = rc.Read(run)
	}
	if err != nil {
		return 0, err
	}
	return n, opErr
}

func (r *Reader) read(fd int, p []byte) (int, error) {
	for {
		if err := r.stopped(r.ctx); err != nil {
			return 0, err
		}
		// Wait until the pipe holds something (or its writers are gone),
		// so that the read below does not block past the context.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		k, err := unix.Poll(fds, int(poll/time.Millisecond))
		if errors.Is(err, unix.EINTR) || k == 0 {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("poll", err)
		}
		n, err := unix.Read(fd, p)
		switch {
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case err != nil:
			return 0, &os.PathError{Op: "read", Path: r.f.Name(), Err: err}
		case n == 0:
			return 0, io.EOF
		}
		return n, nil
	}
}

// Write writes all of p, or returns why it could not: the context's cause,
// or the error of a write (EPIPE once the reader is gone).
func (w *Writer) Write(p []byte) (int, error) {
	return onFD(w.f, true, func(fd int) (int, error) { return w.write(fd, p) })
}

func (w *Writer) write(fd int, p []byte) (int, error) {
	if !w.set {
		// Partial writes: a blocking write of more than the room waits
		// for the reader to take it all, a wakeup per read.
		if err := unix.SetNonblock(fd, true); err != nil {
			return 0, os.NewSyscallError("fcntl", err)
		}
		w.size, _ = unix.FcntlInt(uintptr(fd), unix.F_GETPIPE_SZ, 0)
		w.set = true
	}
	written := 0
	for len(p) > 0 {
		if err := w.stopped(w.ctx); err != nil {
			return written, err
		}
		n, err := unix.Write(fd, p)
		if n > 0 {
			written += n
			p = p[n:]
			continue
		}
		switch {
		case errors.Is(err, unix.EINTR):
		case errors.Is(err, unix.EAGAIN):
			// Full: wait for room (looking at the context every 100 ms),
			// then let the reader take a batch.
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
			if _, err := unix.Poll(fds, int(poll/time.Millisecond)); err != nil && !errors.Is(err, unix.EINTR) {
				return written, os.NewSyscallError("poll", err)
			}
			if fds[0].Revents&unix.POLLOUT != 0 && w.room(fd) < w.batch() {
				time.Sleep(Pause)
			}
		case err != nil:
			return written, &os.PathError{Op: "write", Path: w.f.Name(), Err: err}
		default:
			return written, io.ErrShortWrite
		}
	}
	return written, nil
}

// batch is the room worth a write without waiting: Batch, or half the
// pipe when that is less (a 64 KiB pipe never has Batch free).
func (w *Writer) batch() int {
	if w.size > 0 {
		return min(Batch, w.size/2)
	}
	return Batch
}

// room is how many bytes the pipe can take now (Batch when unknown: a
// FIFO's other end, say, is not always a pipe buffer of known size).
func (w *Writer) room(fd int) int {
	queued, err := unix.IoctlGetInt(fd, unix.TIOCINQ) // FIONREAD
	if err != nil || w.size <= 0 {
		return Batch
	}
	return w.size - queued
}

// Grow asks for a buffer of Size for a pipe made otherwise (os.Pipe's are
// 64 KiB); a system that grants less is fine.
func Grow(f *os.File) {
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, Size) })
	}
}
