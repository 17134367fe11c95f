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

	"github.com/pipebackup/pipe/wal/spool"
	"github.com/pipebackup/pipe/wal/walname"
	"golang.org/x/sync/errgroup"
)

// Pusher pushes ahead of PostgreSQL: files PostgreSQL marked ready
// (pg_wal/archive_status/*.ready) are pushed, Workers at once, before their
// archive_command asks, which then finds them archived and returns at once.
// The archive keeps up with a server that writes WAL faster than one
// upload at a time can send it.
//
// Two ways, chosen by Spawn. With Spawn set, a background pusher (Run)
// sends them while archive_command returns, each waiting for its own file
// (Push). Without, nothing outlives archive_command: the push for one file
// also sends the next ready ones and returns once all are durable. That is
// for where PostgreSQL's postmaster may reap orphaned processes (PID 1 in a
// container, or the script that becomes it): it restarts the whole server when a child it does not know
// dies of a signal, so a background pusher killed by the OOM killer would
// restart the database.
//
// What was pushed ahead is noted in the spool as <name>.ok, holding the
// object's key, written whole (renamed into place) once the object is
// durable; it is believed only when the file's digest matches the key's.
// The spool's lock keeps two pushes from sending the same files at once. A
// push killed at any moment leaves files without markers, which the next
// push sends again (the same content is found archived: nothing is written
// twice).
type Pusher struct {
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
	// Alert, if set, is told of the ready files waiting when they pass
	// MaxBacklog, then at most once every AlertEvery while they stay past
	// it: a note in the spool, removed once they are back under, spans the
	// pushes of archive_command, each its own process.
	Alert func(waiting int)
	// Spawn, when set, starts a background pusher: this program with Run.
	// The channel it returns is closed when that process exits.
	Spawn func() (<-chan struct{}, error)
	// Idle is how long the background pusher waits for a ready file
	// before it exits.
	Idle time.Duration
}

// ErrTimeout is returned by Push when another push held the spool's lock
// for longer than Wait.
var ErrTimeout = errors.New("another pipe wal push held the spool for too long")

// Push archives the file name, whose contents are at p, and up to
// Workers-1 more ready files with it. A file pushed ahead by an earlier
// push returns at once.
func (ah *Pusher) Push(ctx context.Context, name, p string) (*PushResult, error) {
	f, err := walname.ParseName(name)
	if err != nil {
		return nil, err
	}
	if r := ah.noted(name, p); r != nil {
		return r, nil
	}
	if err := spool.Problem(ah.Spool); err != nil {
		return nil, err
	}
	if ah.Spawn != nil {
		key, err := ah.spool().Wait(ctx, name, p, ah.Wait, ah.Spawn)
		if err != nil {
			return nil, err
		}
		return &PushResult{Key: key, Already: true, Ahead: true}, nil
	}
	l, err := ah.lock(ctx)
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if r := ah.noted(name, p); r != nil {
		return r, nil // pushed by the push that held the lock
	}
	others, waiting, err := ah.ready(name)
	if err != nil {
		ah.Log.Warn("pushing ahead: "+err.Error(), "file", name)
	}
	ah.backlog(waiting, true)
	if n := aheadPerPush * ah.Workers; len(others) > n-1 {
		others = others[:n-1]
	}
	// One pool, Workers at once, this command's own file first: errgroup's
	// Go waits for a free slot, so a file pushed beside the pool would
	// only start once every other had started.
	var g errgroup.Group
	g.SetLimit(max(ah.Workers, 1))
	var newest string // the last file this push sends ahead, if any
	if len(others) > 0 {
		newest = others[len(others)-1]
	}
	var r *PushResult
	var pushErr error
	g.Go(func() error {
		r, pushErr = ah.Archive.PushFile(ctx, f, p)
		if pushErr == nil && ah.Pushed != nil {
			ah.Pushed(r)
		}
		return nil
	})
	for _, other := range others {
		g.Go(func() error {
			of, _ := walname.ParseName(other)
			r, err := ah.Archive.PushFile(ctx, of, filepath.Join(ah.WalDir, other))
			if err != nil {
				// Its own archive_command will push it, and say why it
				// failed then.
				ah.Log.Warn("pushing ahead failed", "file", other, "error", err)
				return nil
			}
			ah.mark(other, filepath.Join(ah.WalDir, other), r)
			if other != newest {
				ah.markDone(other)
			}
			return nil
		})
	}
	_ = g.Wait() // each failure of another file was logged; its own push retries it
	return r, pushErr
}

// backlog reports the ready files waiting, and logs an error when they
// are more than MaxBacklog and mayLog; it returns whether it logged.
func (ah *Pusher) backlog(waiting int, mayLog bool) bool {
	exceeded := ah.MaxBacklog > 0 && waiting > ah.MaxBacklog
	if ah.Backlog != nil {
		ah.Backlog(waiting, exceeded)
	}
	if ah.Alert != nil {
		ah.alert(waiting, exceeded)
	}
	if !exceeded || !mayLog {
		return false
	}
	ah.Log.Error("the WAL archive is falling behind: pg_wal keeps every segment until it is archived, and pipe drops none",
		"waiting", waiting, "max_backlog", ah.MaxBacklog)
	return true
}

// AlertEvery is how often Alert is told again of a backlog that stays
// past its limit.
var AlertEvery = time.Hour

// alertNote is the spool's note of the last alert of a backlog.
const alertNote = "backlog.alerted"

// alert tells Alert of a backlog past its limit, unless the spool's note
// says it was told within AlertEvery; a backlog under the limit removes
// the note. The caller holds the spool's lock.
func (ah *Pusher) alert(waiting int, exceeded bool) {
	note := filepath.Join(ah.Spool, alertNote)
	if !exceeded {
		_ = os.Remove(note) // none: nothing was past the limit
		return
	}
	if st, err := os.Stat(note); err == nil && time.Since(st.ModTime()) < AlertEvery {
		return
	}
	err := os.WriteFile(note, nil, 0o600)
	if err == nil {
		now := time.Now() // an empty file written again may keep its time
		err = os.Chtimes(note, now, now)
	}
	if err != nil {
		ah.Log.Warn("noting the backlog's alert: "+err.Error()+"; the next push alerts again", "spool", ah.Spool)
	}
	ah.Alert(waiting)
}

// aheadPerPush × Workers is the most files one push sends: its own and
// the next ready ones, Workers at once. Larger batches mean fewer pushes
// that start a store (most return at once), at the cost of a longer wait
// for the one that sends them. 16 per worker (64 files, 4 batches for the
// bench's burst of 256 in archive_command) was no faster than 4 (16 files,
// 16 batches): 1.23× and 1.13× pgBackRest's async push in two runs
// against 1.17×, the CPUs as idle (1.64-1.67 of 2 busy: the pauses are
// within a batch, while its uploads wait on the store), and with the
// collector off for the command's life the heap grew to its limit (96 MiB
// of RSS against 84).
const aheadPerPush = 4

// mark notes a file pushed ahead: the object's key, and the file's
// identity (device, inode, size, modification time) when it was read.
func (ah *Pusher) mark(name, p string, r *PushResult) {
	if ah.Pushed != nil {
		ah.Pushed(r)
	}
	if err := ah.spool().Note(name, p, r.Key); err != nil {
		ah.Log.Warn("noting a file pushed ahead", "file", name, "error", err)
	}
}

// markDone tells PostgreSQL that the file name, pushed ahead and noted,
// is archived, as its archiver does after archive_command succeeds:
// archive_status/<name>.ready becomes .done, and the archiver, which runs
// one command at a time and is waiting for this one, skips the file
// instead of starting a command only to be answered from the note
// (PostgreSQL 15 and later look for the .ready file again before each
// command; 13 and 14 read the folder before each). A push that sends
// files ahead marks all but the newest of them: that one's
// archive_command still runs (and finds it noted), so that
// pg_stat_archiver's last_archived_wal follows the archive. Should the
// rename fail, or the machine crash before it is on disk, the file's
// archive_command runs and is answered from the note.
func (ah *Pusher) markDone(name string) {
	status := filepath.Join(ah.WalDir, "archive_status", name)
	if err := os.Rename(status+".ready", status+".done"); err != nil && !errors.Is(err, os.ErrNotExist) {
		ah.Log.Debug("marking a file pushed ahead done", "file", name, "error", err)
	}
}

// spool is the pusher's spool, whose notes are checked against a file's
// digest when its identity changed.
func (ah *Pusher) spool() spool.Push { return spool.Push{Dir: ah.Spool, Same: fileIs} }

// noted is the result of an earlier push of the file name at p, if a push
// noted it in the spool and the note still describes the file (see
// spool.Push.Noted).
func (ah *Pusher) noted(name, p string) *PushResult {
	if key, _ := ah.spool().Noted(name, p); key != "" {
		return &PushResult{Key: key, Already: true, Ahead: true}
	}
	return nil
}

// lock takes the spool's lock, waiting up to Wait.
func (ah *Pusher) lock(ctx context.Context) (*os.File, error) {
	deadline := time.Now().Add(ah.Wait)
	for {
		l, err := spool.Lock(ah.Spool, spool.PushLock)
		if !errors.Is(err, spool.ErrBusy) {
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

// ready lists the files PostgreSQL marked ready other than name that are
// not marked pushed (or failed), oldest first, and counts the ready files
// that wait; it forgets markers whose file is no longer ready.
func (ah *Pusher) ready(name string) ([]string, int, error) {
	ents, err := os.ReadDir(filepath.Join(ah.WalDir, "archive_status"))
	if err != nil {
		return nil, 0, fmt.Errorf("reading archive_status: %w", err)
	}
	ready := map[string]bool{}
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".ready"); ok {
			if _, err := walname.ParseName(n); err == nil {
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
	oks := 0
	for _, e := range marks {
		n, ok := strings.CutSuffix(e.Name(), spool.OKExt)
		if !ok {
			n, ok = strings.CutSuffix(e.Name(), spool.ErrorExt)
		}
		switch {
		case !ok:
		case !ready[n]:
			_ = os.Remove(filepath.Join(ah.Spool, e.Name())) // archived and done with
		default:
			marked[n] = true
			if strings.HasSuffix(e.Name(), spool.OKExt) {
				oks++
			}
		}
	}
	var todo []string
	for n := range ready {
		if !marked[n] && n != name {
			todo = append(todo, n)
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
