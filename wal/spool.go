package wal

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrBusy is returned when another process holds a spool's lock: a
// push or prefetcher is already at work.
var ErrBusy = errors.New("another pipe process holds the lock")

// lock takes the spool's lock file name without waiting. The lock goes
// with the process: kill -9 releases it.
func lock(dir, name string) (*os.File, error) {
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

// locked reports whether a process holds the spool's lock file name.
func locked(dir, name string) bool {
	f, err := lock(dir, name)
	if err != nil {
		return errors.Is(err, ErrBusy)
	}
	f.Close()
	return false
}
