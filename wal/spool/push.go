package spool

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pipebackup/pipe/wal/walname"
)

// The push spool. What was pushed ahead is noted in it as <name>.ok,
// holding the object's key and the file's identity when it was read,
// written whole (renamed into place) once the object is durable; a
// background pusher notes a file it failed to push as <name>.error,
// holding why. PushLock keeps two pushes from sending the same files at
// once; the background pusher holds PusherLock while it runs: one pusher
// per spool, and a pusher killed at any moment is noticed (the lock goes
// with it) and replaced.
const (
	PushLock   = "push.lock"
	PusherLock = "pusher.lock"
	OKExt      = ".ok"
	ErrorExt   = ".error"
)

// Push is a push spool, as the commands that answer from it see it.
type Push struct {
	// Dir is where the notes and the locks are.
	Dir string
	// Same reports whether the file at p is the one whose file digest is
	// sum (a note whose file's identity changed is believed only then); nil
	// where the digests are not linked (pipe-wal): such a note is neither
	// believed nor dropped, and Noted returns ErrUnsure.
	Same func(p, sum string) bool
}

// ErrUnsure is Noted's answer for a note it cannot check: the file's
// identity changed since, and Push.Same is nil. A push that can digest the
// file decides.
var ErrUnsure = errors.New("a note for another identity of the file: its digest decides")

// ErrNotReady is Wait's answer for a file that is no longer marked ready
// (its archive_command returned and PostgreSQL marked it done, and
// someone pushes it again): the caller pushes it itself.
var ErrNotReady = errors.New("no longer marked ready")

// Noted returns the key of the object an earlier push noted for the file
// name at p, if the note still describes the file: the same device,
// inode, size and modification time, or else the same digest (Same). A
// note left by another copy of the data directory, or for a file
// rewritten since, never passes for this file, and goes. It needs no
// store: archive_command for a file pushed ahead returns without one.
// "" and no error: no note.
func (s Push) Noted(name, p string) (string, error) {
	mp := filepath.Join(s.Dir, name+OKExt)
	b, err := os.ReadFile(mp)
	if err != nil {
		return "", nil //nolint:nilerr // no note (or none readable): not pushed ahead, which the caller pushes
	}
	key, id, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	o, err := walname.ParseObject(filepath.Base(key))
	ok := err == nil && o.Name == name
	if ok {
		if cur, err := FileID(p); err != nil || cur != id {
			if s.Same == nil {
				return "", ErrUnsure
			}
			ok = s.Same(p, o.FileSum)
		}
	}
	if !ok {
		_ = os.Remove(mp) // stale: push the file again
		return "", nil
	}
	// The note stays until PostgreSQL marks the file done (the pusher's
	// look at what is ready drops it then): a pusher looking now must not
	// push it again.
	return key, nil
}

// Note notes the file name at p pushed ahead as the object key.
func (s Push) Note(name, p, key string) error {
	note := key + "\n"
	if id, err := FileID(p); err == nil {
		note += id + "\n"
	}
	return WriteAtomic(filepath.Join(s.Dir, name+OKExt), []byte(note), false)
}

// NoteFailure notes that the background pusher failed to push name, and
// why: the file's archive_command reports it.
func (s Push) NoteFailure(name string, why error) error {
	return WriteAtomic(filepath.Join(s.Dir, name+ErrorExt), []byte(why.Error()+"\n"), false)
}

// FileID is what identifies a file's contents without reading them: its
// device, inode, size and modification time.
func FileID(p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", errors.New("no inode")
	}
	return fmt.Sprintf("%d %d %d %d", st.Dev, st.Ino, fi.Size(), fi.ModTime().UnixNano()), nil
}

// Failed reports the background pusher's failure to push name, and
// forgets it: the pusher tries the file again once PostgreSQL has heard
// why it failed.
func (s Push) Failed(name string) error {
	p := filepath.Join(s.Dir, name+ErrorExt)
	if !Exists(p) {
		return nil // no note: it has not failed
	}
	msg, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("the background pusher's note: %w", err)
	}
	_ = os.Remove(p) // the next try starts clean
	return fmt.Errorf("the background pusher: %s", strings.TrimSpace(string(msg)))
}

// Exists reports whether there is a file at p.
func Exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Wait waits until the background pusher archived the file name at p,
// starting a pusher (spawn) whenever none runs and none it started is
// still starting, for at most wait. It returns the object's key, the
// failure the pusher noted, ErrNotReady when the file is no longer marked
// ready and nobody noted it, an error wrapping ErrSpool when no note can
// come, or ErrUnsure.
func (s Push) Wait(ctx context.Context, name, p string, wait time.Duration, spawn func() (<-chan struct{}, error)) (key string, err error) {
	deadline := time.Now().Add(wait)
	var started <-chan struct{} // the pusher this wait started, if any
	perr := Poll(ctx, func() bool {
		if key, err = s.Noted(name, p); key != "" || err != nil {
			return true
		}
		if err = s.Failed(name); err != nil {
			return true
		}
		if err = Problem(s.Dir); err != nil {
			// The pusher cannot note this file, nor its failure.
			return true
		}
		if !Exists(filepath.Join(filepath.Dir(p), "archive_status", name+".ready")) {
			// No longer marked ready, and not noted: no pusher will
			// push it (it pushes ready files); the caller does.
			if key, err = s.Noted(name, p); key == "" && err == nil {
				err = ErrNotReady
			}
			return true
		}
		if !Locked(s.Dir, PusherLock) {
			// None runs: it may have just finished this file.
			if key, err = s.Noted(name, p); key != "" || err != nil {
				return true
			}
			// One started here takes a moment to hold its lock: another
			// is started only once it has exited (each would read the
			// store's settings and find the lock taken).
			if started == nil || Exited(started) {
				if started, err = spawn(); err != nil {
					err = fmt.Errorf("starting the background pusher: %w", err)
					return true
				}
			}
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("%s: the background pusher did not archive it within %s; PostgreSQL will try again", name, wait)
			return true
		}
		return false
	})
	if perr != nil {
		return "", perr
	}
	return key, err
}

// Exited reports whether the process whose exit ch closes has exited.
func Exited(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// WaitNoted waits, at most wait, for a running background pusher to note
// the file name at p archived, and returns the object's key. It starts
// nothing: it returns "", for the caller to decide, as soon as no pusher
// runs, the pusher noted a failure of the file (which the caller
// reports), the spool's disk is full (no note can come: the caller pushes
// the file itself), the note cannot be checked (ErrUnsure) or wait ran
// out.
func (s Push) WaitNoted(ctx context.Context, name, p string, wait time.Duration) string {
	deadline := time.Now().Add(wait)
	var key string
	_ = Poll(ctx, func() bool {
		var err error
		key, err = s.Noted(name, p)
		return key != "" || err != nil || Exists(filepath.Join(s.Dir, name+ErrorExt)) || !Locked(s.Dir, PusherLock) || time.Now().After(deadline) ||
			Problem(s.Dir) != nil // no note can come: the caller pushes the file itself
	})
	return key
}

// Poll calls done, every 2 ms and then less often, up to every 50 ms,
// until it returns true or ctx ends.
func Poll(ctx context.Context, done func() bool) error {
	tick := 2 * time.Millisecond
	for !done() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(tick):
		}
		tick = min(tick*2, 50*time.Millisecond)
	}
	return nil
}
