package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Async is pushing in the background: archive_command (Wait) returns once
// the background pusher (Pusher.Run) has archived its segment, and the
// pusher sends every segment PostgreSQL marked ready, several at once.
//
// They talk through markers in the spool: <name>.ok, written once the file
// is durable in the store and holding its digest, and <name>.error, holding
// why a push failed. A marker is written whole (renamed into place), and
// the pusher holds the spool's lock while it runs, so a pusher killed at
// any moment is noticed and replaced, and a segment pushed again is found
// archived (push is idempotent).
type Async struct {
	Archive *Archive
	// WalDir is pg_wal, where the segments and archive_status are.
	WalDir string
	// Spool is where the markers and the lock are.
	Spool string
	// Workers is how many segments the pusher sends at once.
	Workers int
	// MaxBacklog is the number of segments waiting beyond which the
	// pusher logs an error on every pass (and Backlog reports it).
	MaxBacklog int
	// Idle is how long the pusher waits for new segments before it exits.
	Idle time.Duration
	Log  *slog.Logger
	// Pushed, if set, is told of every file the pusher archived, and of
	// the segments waiting after each pass.
	Pushed  func(r *PushResult)
	Backlog func(waiting int, exceeded bool)
}

const (
	pusherLock = "pusher.lock"
	okExt      = ".ok"
	errorExt   = ".error"
)

// ErrTimeout is returned by Wait when the pusher did not archive the file
// in time.
var ErrTimeout = errors.New("the background pusher did not archive it in time")

// Wait waits until the pusher archived the file name (whose contents are
// at p), starting it with spawn whenever none runs, for at most timeout.
func (as *Async) Wait(ctx context.Context, name, p string, timeout time.Duration, spawn func() error) (*PushResult, error) {
	deadline := time.Now().Add(timeout)
	var sum string
	tick := 10 * time.Millisecond
	for {
		r, err := as.marker(name, p, &sum)
		if r != nil || err != nil {
			return r, err
		}
		if !locked(as.Spool, pusherLock) {
			// Nothing runs: look again (it may have finished just now),
			// then start a pusher.
			if r, err := as.marker(name, p, &sum); r != nil || err != nil {
				return r, err
			}
			if err := spawn(); err != nil {
				return nil, fmt.Errorf("starting the background pusher: %w", err)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: %w (%s); PostgreSQL will try again", name, ErrTimeout, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(tick):
		}
		tick = min(tick*2, 100*time.Millisecond)
	}
}

// marker reads the file's markers: its .ok (checked against the file's
// digest, so a marker left by another copy of the data directory never
// passes for this file) or its .error.
func (as *Async) marker(name, p string, sum *string) (*PushResult, error) {
	b, err := os.ReadFile(filepath.Join(as.Spool, name+okExt))
	if err == nil {
		if *sum == "" {
			data, err := readFile(p)
			if err != nil {
				return nil, err
			}
			*sum = digest(data)
		}
		key, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
		if o, perr := ParseObject(filepath.Base(key)); perr == nil && o.FileSum == *sum {
			return &PushResult{Key: key, Already: true}, nil
		}
		// Not this file's: forget it, and push again.
		_ = os.Remove(filepath.Join(as.Spool, name+okExt)) // the pusher writes it anew
	}
	msg, err := os.ReadFile(filepath.Join(as.Spool, name+errorExt))
	if err == nil {
		_ = os.Remove(filepath.Join(as.Spool, name+errorExt)) // the next try starts clean
		return nil, fmt.Errorf("the background pusher: %s", strings.TrimSpace(string(msg)))
	}
	return nil, nil
}

// Run is the background pusher: while segments are ready, it archives
// them, Workers at once, oldest first, and marks each; once none has come
// for Idle, it returns. It returns ErrBusy when another pusher runs.
func (as *Async) Run(ctx context.Context) error {
	l, err := lock(as.Spool, pusherLock)
	if err != nil {
		return err
	}
	defer l.Close()
	idleSince := time.Now()
	lastWarn := time.Time{}
	for ctx.Err() == nil {
		todo, waiting, err := as.ready()
		if err != nil {
			return err
		}
		exceeded := as.MaxBacklog > 0 && waiting > as.MaxBacklog
		if as.Backlog != nil {
			as.Backlog(waiting, exceeded)
		}
		if exceeded && time.Since(lastWarn) > time.Minute {
			lastWarn = time.Now()
			as.Log.Error("the WAL archive is falling behind: pg_wal keeps every segment until it is archived, and pipe drops none",
				"waiting", waiting, "max_backlog", as.MaxBacklog)
		}
		if len(todo) == 0 {
			if time.Since(idleSince) > as.Idle {
				return nil
			}
			select {
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		failed := as.pushAll(ctx, todo)
		idleSince = time.Now()
		if failed == len(todo) {
			// Everything failed: the store is down. Do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
	return ctx.Err()
}

// ready lists the files PostgreSQL marked ready that have no marker, in
// the order to push them, and how many ready files wait in all; it
// forgets markers whose file is no longer ready. A file whose push failed
// is tried again once archive_command has reported the failure (and
// removed its .error): PostgreSQL's retries pace the pusher's.
func (as *Async) ready() ([]string, int, error) {
	ents, err := os.ReadDir(filepath.Join(as.WalDir, "archive_status"))
	if err != nil {
		return nil, 0, fmt.Errorf("reading archive_status: %w", err)
	}
	ready := map[string]bool{}
	for _, e := range ents {
		if name, ok := strings.CutSuffix(e.Name(), ".ready"); ok {
			if _, err := ParseName(name); err == nil {
				ready[name] = true
			}
		}
	}
	marks, err := os.ReadDir(as.Spool)
	if err != nil {
		return nil, 0, err
	}
	marked := map[string]bool{} // archived, or failed: the foreground says so, and PostgreSQL retries
	oks := 0
	for _, e := range marks {
		name, ok := strings.CutSuffix(e.Name(), okExt)
		if !ok {
			name, ok = strings.CutSuffix(e.Name(), errorExt)
		}
		if !ok {
			continue
		}
		if !ready[name] {
			_ = os.Remove(filepath.Join(as.Spool, e.Name())) // archived and done with
			continue
		}
		marked[name] = true
		if strings.HasSuffix(e.Name(), okExt) {
			oks++
		}
	}
	var todo []string
	for name := range ready {
		if !marked[name] {
			todo = append(todo, name)
		}
	}
	sort.Slice(todo, func(i, j int) bool { return pushOrder(todo[i]) < pushOrder(todo[j]) })
	return todo, len(ready) - oks, nil
}

// pushOrder sorts timeline history files first (a new timeline is worth
// little without its history), then by segment, as PostgreSQL does.
func pushOrder(name string) string {
	if strings.HasSuffix(name, ".history") {
		return "0" + name
	}
	return "1" + name[8:] + name[:8]
}

// pushAll pushes the files, Workers at once, and marks each; it returns
// how many failed.
func (as *Async) pushAll(ctx context.Context, names []string) int {
	var mu sync.Mutex
	failed := 0
	g := errgroup.Group{}
	g.SetLimit(max(as.Workers, 1))
	for _, name := range names {
		g.Go(func() error {
			f, _ := ParseName(name)
			data, err := readFile(filepath.Join(as.WalDir, name))
			var r *PushResult
			if err == nil {
				r, err = as.Archive.PushData(ctx, f, data)
			}
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err() // stopping: no marker, the next pusher pushes it
				}
				mu.Lock()
				failed++
				mu.Unlock()
				as.Log.Error("push failed", "file", name, "error", err)
				_ = writeAtomic(filepath.Join(as.Spool, name+errorExt), []byte(err.Error()+"\n")) // the foreground then times out instead
				return nil
			}
			if as.Pushed != nil {
				as.Pushed(r)
			}
			if err := writeAtomic(filepath.Join(as.Spool, name+okExt), []byte(r.Key+"\n")); err != nil {
				as.Log.Error("marking a pushed file", "file", name, "error", err)
			}
			return nil
		})
	}
	_ = g.Wait() // each failure is marked, or the pusher is stopping
	return failed
}
