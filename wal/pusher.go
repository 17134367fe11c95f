package wal

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"time"

	"github.com/pipebackup/pipe/wal/spool"
	"github.com/pipebackup/pipe/wal/walname"
)

// The background pusher: Pusher with Spawn. archive_command (Push) returns
// once the pusher (Run) has noted its file in the spool, or reports the
// failure the pusher noted, which lets the pusher try that file again
// (see package spool).

// Run is the background pusher: while files are ready, it pushes them,
// oldest first, Workers at once, a new one as soon as one is done, and
// notes each; once none has been ready for Idle, it returns. It returns
// ErrBusy when another pusher runs.
func (ah *Pusher) Run(ctx context.Context) error {
	l, err := spool.Lock(ah.Spool, spool.PusherLock)
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
	f, _ := walname.ParseName(name)
	r, err := ah.Archive.PushFile(ctx, f, p)
	switch {
	case err == nil:
		ah.mark(name, p, r)
	case errors.Is(err, context.Canceled) || ctx.Err() != nil:
		// Stopping: no note; the next pusher pushes it.
	default:
		ah.Log.Error("push failed", "file", name, "error", err)
		_ = ah.spool().NoteFailure(name, err) // else archive_command times out and PostgreSQL retries
	}
}
