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
	"time"

	"golang.org/x/sync/errgroup"
)

// Ahead is pushing ahead of PostgreSQL: the archive_command for one file
// also pushes the next files PostgreSQL marked ready
// (pg_wal/archive_status/*.ready), Workers at once, and returns once they
// are all durable; the archive_commands for those then find them archived
// and return at once. The archive keeps up with a server that writes WAL
// faster than one upload at a time can send it.
//
// Nothing outlives archive_command: no background process is left for
// PostgreSQL's postmaster to reap (in a container it is often PID 1, where
// orphans go, and it restarts the whole server when a child it does not
// know dies of a signal).
//
// What was pushed ahead is noted in the spool as <name>.ok, holding the
// object's key, written whole (renamed into place) once the object is
// durable; it is believed only when the file's digest matches the key's.
// The spool's lock keeps two pushes from sending the same files at once. A
// push killed at any moment leaves files without markers, which the next
// push sends again (the same content is found archived: nothing is written
// twice).
type Ahead struct {
	Archive *Archive
	// WalDir is pg_wal, where the segments and archive_status are.
	WalDir string
	// Spool is where the markers and the lock are.
	Spool string
	// Workers is how many files are sent at once.
	Workers int
	// MaxBacklog is the number of ready files beyond which each push logs
	// an error.
	MaxBacklog int
	// Wait is how long a push waits for the spool's lock.
	Wait time.Duration
	Log  *slog.Logger
	// Pushed, if set, is told of every file pushed; Backlog of the ready
	// files waiting when the push began.
	Pushed  func(r *PushResult)
	Backlog func(waiting int, exceeded bool)
}

const (
	pushLock = "push.lock"
	okExt    = ".ok"
)

// ErrTimeout is returned by Push when another push held the spool's lock
// for longer than Wait.
var ErrTimeout = errors.New("another pipe wal push held the spool for too long")

// Push archives the file name, whose contents are at p, and up to
// Workers-1 more ready files with it. A file pushed ahead by an earlier
// push returns at once.
func (ah *Ahead) Push(ctx context.Context, name, p string) (*PushResult, error) {
	f, err := ParseName(name)
	if err != nil {
		return nil, err
	}
	data, err := readFile(p)
	if err != nil {
		return nil, err
	}
	if r := ah.marked(name, data); r != nil {
		return r, nil
	}
	l, err := ah.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if r := ah.marked(name, data); r != nil {
		return r, nil // pushed by the push that held the lock
	}
	others, waiting, err := ah.ready(name)
	if err != nil {
		ah.Log.Warn("pushing ahead: "+err.Error(), "file", name)
	}
	exceeded := ah.MaxBacklog > 0 && waiting > ah.MaxBacklog
	if ah.Backlog != nil {
		ah.Backlog(waiting, exceeded)
	}
	if exceeded {
		ah.Log.Error("the WAL archive is falling behind: pg_wal keeps every segment until it is archived, and pipe drops none",
			"waiting", waiting, "max_backlog", ah.MaxBacklog)
	}
	if len(others) > ah.Workers-1 {
		others = others[:max(ah.Workers-1, 0)]
	}
	var g errgroup.Group
	for _, other := range others {
		g.Go(func() error {
			of, _ := ParseName(other)
			data, err := readFile(filepath.Join(ah.WalDir, other))
			var r *PushResult
			if err == nil {
				r, err = ah.Archive.PushData(ctx, of, data)
			}
			if err != nil {
				// Its own archive_command will push it, and say why it
				// failed then.
				ah.Log.Warn("pushing ahead failed", "file", other, "error", err)
				return nil
			}
			ah.mark(other, r)
			return nil
		})
	}
	r, err := ah.Archive.PushData(ctx, f, data)
	if err == nil && ah.Pushed != nil {
		ah.Pushed(r)
	}
	_ = g.Wait() // each failure was logged; its own push retries it
	return r, err
}

// mark notes a file pushed ahead.
func (ah *Ahead) mark(name string, r *PushResult) {
	if ah.Pushed != nil {
		ah.Pushed(r)
	}
	if err := writeAtomic(filepath.Join(ah.Spool, name+okExt), []byte(r.Key+"\n")); err != nil {
		ah.Log.Warn("noting a file pushed ahead", "file", name, "error", err)
	}
}

// marked returns the result of an earlier push of the file, if its
// marker is there and names an object with the file's digest: a marker
// left by another copy of the data directory never passes for this file.
func (ah *Ahead) marked(name string, data []byte) *PushResult {
	p := filepath.Join(ah.Spool, name+okExt)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	key, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	if o, err := ParseObject(filepath.Base(key)); err == nil && o.Name == name && o.FileSum == digest(data) {
		_ = os.Remove(p) // PostgreSQL marks it done once this push returns
		return &PushResult{Key: key, Already: true, Ahead: true, Bytes: int64(len(data))}
	}
	_ = os.Remove(p) // not this file's: push it
	return nil
}

// lock takes the spool's lock, waiting up to Wait.
func (ah *Ahead) lock(ctx context.Context) (*os.File, error) {
	deadline := time.Now().Add(ah.Wait)
	for {
		l, err := lock(ah.Spool, pushLock)
		if !errors.Is(err, ErrBusy) {
			return l, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w (%s): it is pushing the same files; PostgreSQL will try again", ErrTimeout, ah.Wait)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// ready lists the files PostgreSQL marked ready after name that are not
// marked pushed, oldest first, and counts the ready files that wait; it
// forgets markers whose file is no longer ready.
func (ah *Ahead) ready(name string) ([]string, int, error) {
	ents, err := os.ReadDir(filepath.Join(ah.WalDir, "archive_status"))
	if err != nil {
		return nil, 0, fmt.Errorf("reading archive_status: %w", err)
	}
	ready := map[string]bool{}
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".ready"); ok {
			if _, err := ParseName(n); err == nil {
				ready[n] = true
			}
		}
	}
	if err := os.MkdirAll(ah.Spool, 0o700); err != nil {
		return nil, len(ready), err
	}
	marks, err := os.ReadDir(ah.Spool)
	if err != nil {
		return nil, len(ready), err
	}
	marked := map[string]bool{}
	for _, e := range marks {
		n, ok := strings.CutSuffix(e.Name(), okExt)
		switch {
		case !ok:
		case !ready[n]:
			_ = os.Remove(filepath.Join(ah.Spool, e.Name())) // archived and done with
		default:
			marked[n] = true
		}
	}
	var todo []string
	for n := range ready {
		if !marked[n] && n != name {
			todo = append(todo, n)
		}
	}
	sort.Slice(todo, func(i, j int) bool { return pushOrder(todo[i]) < pushOrder(todo[j]) })
	return todo, len(ready) - len(marked), nil
}

// pushOrder sorts timeline history files first (a new timeline is worth
// little without its history), then by segment, as PostgreSQL does.
func pushOrder(name string) string {
	if strings.HasSuffix(name, ".history") {
		return "0" + name
	}
	return "1" + name[8:] + name[:8]
}
