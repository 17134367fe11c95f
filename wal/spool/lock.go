package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// ErrBusy is returned when another process holds a spool's lock: a
// push or prefetcher is already at work.
var ErrBusy = errors.New("another pipe process holds the lock")

// ErrSpool is returned (by wal's Pusher.Push) when the push spool cannot be
// written (its disk is full, say): nothing can note what was pushed
// ahead, and the caller pushes its file itself.
var ErrSpool = errors.New("the push spool cannot be written")

// Statfs is unix.Statfs; tests replace it with a full disk.
var Statfs = unix.Statfs

// Problem returns an error wrapping ErrSpool, naming the disk and
// what to do, when the spool's file system has no room left for a note
// (no block or no inode a process without root may use), or the spool
// cannot be made.
func Problem(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("%w: %w", ErrSpool, sdk.ExplainIO(err))
	}
	var st unix.Statfs_t
	// No answer from statfs (or a file system that counts no blocks) is
	// no verdict: the writes will tell.
	if Statfs(dir, &st) == nil && st.Blocks > 0 && (st.Bavail == 0 || (st.Files > 0 && st.Ffree == 0)) {
		abs, _ := filepath.Abs(dir)
		return fmt.Errorf("%w: the disk of %s is full (%d bytes, %d inodes free): free space there, or set push { spool = \"…\" } on another disk", ErrSpool, abs, st.Bavail*uint64(st.Bsize), st.Ffree)
	}
	return nil
}

// Lock takes the spool's lock file name, ErrBusy when another process
// holds it. The lock goes with the process: kill -9 releases it. Locked
// takes the lock for an instant to see whether anyone holds it, so a
// taker that finds it busy tries again for lockPatience before it gives
// up: a pusher or prefetcher starting while a command polls must not
// take the poll for another pusher.
func Lock(dir, name string) (*os.File, error) {
	deadline := time.Now().Add(lockPatience)
	for {
		f, err := tryLock(dir, name)
		if !errors.Is(err, ErrBusy) || time.Now().After(deadline) {
			return f, err
		}
		time.Sleep(time.Millisecond)
	}
}

// lockPatience is how long Lock tries a lock held for an instant: far
// longer than Locked holds one, far shorter than a pusher or prefetcher.
const lockPatience = 20 * time.Millisecond

// tryLock takes the spool's lock file name without waiting.
func tryLock(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("the spool: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("the spool: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrBusy
		}
		return nil, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return f, nil
}

// Locked reports whether a process holds the spool's lock file name.
func Locked(dir, name string) bool {
	f, err := tryLock(dir, name)
	if err != nil {
		return errors.Is(err, ErrBusy)
	}
	f.Close()
	return false
}

// WriteAtomic writes data to dest through a temporary file beside it.
func WriteAtomic(dest string, data []byte, durable bool) error {
	err := WriteAtomicWith(dest, durable, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", dest, err)
	}
	return nil
}

// WriteAtomicWith writes dest through a temporary file beside it, which
// fill writes; dest appears, whole, only when fill and the writes
// succeeded (fsynced first if durable), and nothing is left otherwise.
func WriteAtomicWith(dest string, durable bool, fill func(w io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(dest), ".pipe-tmp-"+filepath.Base(dest)+"-")
	if err != nil {
		return err
	}
	err = fill(tmp)
	if err == nil && durable {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dest)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
