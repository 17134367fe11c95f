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

// The background pusher: Ahead with Spawn. archive_command (wait) returns
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
// pusher whenever none runs, for at most Wait.
func (ah *Ahead) wait(ctx context.Context, name, p string) (*PushResult, error) {
	deadline := time.Now().Add(ah.Wait)
	tick := 2 * time.Millisecond
	for {
		if r := Marked(ah.Spool, name, p); r != nil {
			return r, nil
		}
		if err := ah.failed(name); err != nil {
			return nil, err
		}
		if !locked(ah.Spool, pusherLock) {
			// None runs: it may have just finished this file.
			if r := Marked(ah.Spool, name, p); r != nil {
				return r, nil
			}
			if err := ah.Spawn(); err != nil {
				return nil, fmt.Errorf("starting the background pusher: %w", err)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: the background pusher did not archive it within %s; PostgreSQL will try again", name, ah.Wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(tick):
		}
		tick = min(tick*2, 50*time.Millisecond)
	}
}

// failed reports the pusher's failure to push name, and forgets it: the
// pusher tries the file again once PostgreSQL has heard why it failed.
func (ah *Ahead) failed(name string) error {
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
func (ah *Ahead) Run(ctx context.Context) error {
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
func (ah *Ahead) pushOne(ctx context.Context, name string) {
	p := filepath.Join(ah.WalDir, name)
	f, _ := ParseName(name)
	data, err := readFile(p)
	var r *PushResult
	if err == nil {
		r, err = ah.Archive.PushData(ctx, f, data)
		filePool.put(data)
	}
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
