package wal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The background pusher: Pusher with Spawn. archive_command (wait) returns
// once the pusher (Run) has noted its file <name>.ok in the spool, or
// reports the <name>.error the pusher noted, which lets the pusher try
// that file again. The pusher holds pusherLock while it runs: one pusher
// per spool, and a pusher killed at any moment is noticed (the lock goes
// with it) and replaced.

const (
	pusherLock = "pusher.lock"
	errorExt   = ".error"
)

// wait waits until the background pusher archived the file, starting a
// pusher whenever none runs (and none it started is still starting), for
// at most Wait.
func (ah *Pusher) wait(ctx context.Context, name, p string) (r *PushResult, err error) {
	deadline := time.Now().Add(ah.Wait)
	var started <-chan struct{} // the pusher this wait started, if any
	perr := poll(ctx, func() bool {
		if r = NotedPush(ah.Spool, name, p); r != nil {
			return true
		}
		if err = ah.failed(name); err != nil {
			return true
		}
		if err = spoolProblem(ah.Spool); err != nil {
			// The pusher cannot note this file, nor its failure.
			return true
		}
		if !exists(filepath.Join(filepath.Dir(p), "archive_status", name+".ready")) {
			// No longer marked ready, and not noted: no pusher will
			// push it (it pushes ready files); this push does.
			if r = NotedPush(ah.Spool, name, p); r == nil {
				err = errNotReady
			}
			return true
		}
		if !locked(ah.Spool, pusherLock) {
			// None runs: it may have just finished this file.
			if r = NotedPush(ah.Spool, name, p); r != nil {
				return true
			}
			// One started here takes a moment to hold its lock: another
			// is started only once it has exited (each would read the
			// store's settings and find the lock taken).
			if started == nil || exited(started) {
				if started, err = ah.Spawn(); err != nil {
					err = fmt.Errorf("starting the background pusher: %w", err)
					return true
				}
			}
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("%s: the background pusher did not archive it within %s; PostgreSQL will try again", name, ah.Wait)
			return true
		}
		return false
	})
	if perr != nil {
		return nil, perr
	}
	return r, err
}

// exited reports whether the process whose exit ch closes has exited.
func exited(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// errNotReady is wait's answer for a file that is no longer marked ready
// (its archive_command returned and PostgreSQL marked it done, and
// someone pushes it again): Push pushes it itself.
var errNotReady = errors.New("no longer marked ready")

// WaitNoted waits, at most wait, for a running background pusher to note
// the file name at p archived. It needs no store and starts nothing: it
// returns nil, for Push to decide, as soon as no pusher runs, the pusher
// noted a failure of the file (which Push reports), the spool's disk is
// full (no note can come: Push pushes the file itself), or wait ran out.
// It is pipe-wal's answer to an archive_command, without the start of a program
// that links the stores.
func WaitNoted(ctx context.Context, spool, name, p string, wait time.Duration) *PushResult {
	deadline := time.Now().Add(wait)
	var r *PushResult
	_ = poll(ctx, func() bool {
		r = NotedPush(spool, name, p)
		return r != nil || exists(filepath.Join(spool, name+errorExt)) || !locked(spool, pusherLock) || time.Now().After(deadline) ||
			spoolProblem(spool) != nil // no note can come: pipe pushes the file itself
	})
	return r
}

// poll calls done, every 2 ms and then less often, up to every 50 ms,
// until it returns true or ctx ends.
func poll(ctx context.Context, done func() bool) error {
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

// failed reports the pusher's failure to push name, and forgets it: the
// pusher tries the file again once PostgreSQL has heard why it failed.
func (ah *Pusher) failed(name string) error {
	p := filepath.Join(ah.Spool, name+errorExt)
	if !exists(p) {
		return nil // no note: it has not failed
	}
	msg, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("the background pusher's note: %w", err)
	}
	_ = os.Remove(p) // the next try starts clean
	return fmt.Errorf("the background pusher: %s", strings.TrimSpace(string(msg)))
}

// exists reports whether there is a file at p.
func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Run is the background pusher: while files are ready, it pushes them,
// oldest first, Workers at once, a new one as soon as one is done, and
// notes each; once none has been ready for Idle, it returns. It returns
// ErrBusy when another pusher runs.
func (ah *Pusher) Run(ctx context.Context) error {
	l, err := lock(ah.Spool, pusherLock)
	if err != nil {
		return err
	}
	defer l.Close()
	var mu sync.Mutex
	inflight := map[string]bool{}
	done := make(chan struct{}, ah.Workers)
	idleSince := time.Now()
	lastWarn := time.Time{}
	for ctx.Err() == nil {
		// What is ready and noted is read under the lock a finished push
		// takes to leave inflight after it wrote its note: read outside
		// it, a push that ended in between looked neither noted nor in
		// flight, and was pushed again.
		mu.Lock()
		todo, waiting, err := ah.ready("")
		if err != nil {
			mu.Unlock()
			return err
		}
		busy := len(inflight)
		for _, name := range todo {
			if busy >= ah.Workers {
				break
			}
			if inflight[name] {
				continue
			}
			inflight[name] = true
			busy++
			go func() {
				ah.pushOne(ctx, name)
				mu.Lock()
				delete(inflight, name)
				mu.Unlock()
				done <- struct{}{}
			}()
		}
		mu.Unlock()
		if ah.backlog(waiting, time.Since(lastWarn) > time.Minute) { // once a minute
			lastWarn = time.Now()
		}
		if busy > 0 {
			idleSince = time.Now()
		} else if time.Since(idleSince) > ah.Idle {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-done:
		case <-time.After(20 * time.Millisecond):
		}
	}
	mu.Lock()
	for len(inflight) > 0 {
		mu.Unlock()
		<-done
		mu.Lock()
	}
	mu.Unlock()
	return ctx.Err()
}

// pushOne pushes one ready file and notes how it went.
func (ah *Pusher) pushOne(ctx context.Context, name string) {
	p := filepath.Join(ah.WalDir, name)
	f, _ := ParseName(name)
	r, err := ah.Archive.PushFile(ctx, f, p)
	switch {
	case err == nil:
		ah.mark(name, p, r)
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		// Stopping: no note; the next pusher pushes it.
	default:
		ah.Log.Error("push failed", "file", name, "error", err)
		_ = writeAtomic(filepath.Join(ah.Spool, name+errorExt), []byte(err.Error()+"\n"), false) // else archive_command times out and PostgreSQL retries
	}
}
