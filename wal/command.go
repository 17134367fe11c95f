package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Command is what pipe wal push (archive_command) and pipe wal fetch
// (restore_command) do with one archive, apart from reading the pipeline
// file and printing: whether a file was pushed ahead already, whether a
// background pusher or prefetcher is started, when the store is opened
// (a push the spool answers needs none), and how failures are retried.
// The commands only parse their flags, build a Command and call it.
type Command struct {
	Settings CommandSettings
	// DataDir is the data directory: where pg_control, pg_wal and the
	// spools are.
	DataDir string
	// Open opens the archive's store; the caller lets go of it with the
	// function it returns.
	Open func(ctx context.Context) (*Archive, func(), error)
	// Spawn starts this program in the background with args (the
	// background pusher or prefetcher), its output appended to logPath.
	// The channel it returns is closed when the process exits.
	Spawn func(args []string, logPath string) (<-chan struct{}, error)
	// BackgroundArgs are the arguments that give a background process the
	// same archive as this one (file, --archive, --pgdata, --var).
	BackgroundArgs []string
	Log            *slog.Logger
	// Pushed, Backlog and Fetched, if set, are told of every file pushed,
	// of the ready files waiting, and of every file fetched (from "spool"
	// or "store") or failed attempt (from "").
	Pushed  func(r *PushResult)
	Backlog func(waiting int, exceeded bool)
	Fetched func(from string)
	// BacklogAlert, if set, is told when the ready files waiting pass
	// MaxBacklog, then at most once an hour while they stay past it (see
	// Pusher.Alert).
	BacklogAlert func(waiting int)
}

// CommandSettings are an archive's settings for push and fetch.
type CommandSettings struct {
	// Async pushes ahead (push { async = true }); Background is the
	// background attribute (see Background).
	Async      bool
	Background string
	Workers    int
	MaxBacklog int
	// PushSpool and FetchSpool are relative to the data directory unless
	// absolute.
	PushSpool, FetchSpool string
	// PushTimeout is how long a push waits for its file to be pushed
	// ahead.
	PushTimeout time.Duration
	// Prefetch is how many segments a fetch brings ahead (0: none);
	// Retries how often a failed fetch is tried again.
	Prefetch, Retries int
	SystemID          uint64
	SegmentSize       uint32
}

// PusherIdle is how long the background pusher waits for a ready file
// before it exits.
const PusherIdle = 5 * time.Second

// inData resolves a path an archive gives relative to the data
// directory.
func (c *Command) inData(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.DataDir, p)
}

// backgroundAllowed reports whether the archive's background attribute
// lets a process outlive the command PostgreSQL runs, here.
func (c *Command) backgroundAllowed() bool {
	ok, _ := Background(c.Settings.Background)
	return ok
}

// ahead is the archive's pushing ahead, for files in walDir.
func (c *Command) ahead(walDir string) *Pusher {
	return &Pusher{Spool: c.inData(c.Settings.PushSpool), WalDir: walDir, Workers: c.Settings.Workers, MaxBacklog: c.Settings.MaxBacklog,
		Wait: c.Settings.PushTimeout, Idle: PusherIdle, Log: c.Log, Pushed: c.Pushed, Backlog: c.Backlog, Alert: c.BacklogAlert}
}

// startsPusher has ah start the background pusher, this program's
// (Spawn) with this archive's arguments, when it finds none running.
func (c *Command) startsPusher(ah *Pusher) {
	args := append([]string{"wal", "push", "--background"}, c.BackgroundArgs...)
	ah.Spawn = func() (<-chan struct{}, error) {
		return c.Spawn(args, filepath.Join(ah.Spool, "pusher.log"))
	}
}

// use makes ar the archive the pusher pushes to; what its pushes cannot
// hold in memory spills to the spool.
func (ah *Pusher) use(ar *Archive) {
	ah.Archive = ar
	if ar.SpillDir == "" {
		ar.SpillDir = ah.Spool
	}
}

// Push archives the file at p as archive_command does: with push { async
// }, it answers from the spool for a file pushed ahead, waits for the
// background pusher (started if none runs) or pushes its file and the
// next ready ones itself; else, and when the spool cannot be written, it
// pushes the file alone. The store is opened only when this process
// pushes. The result says what happened (PushResult.Already, .Ahead).
func (c *Command) Push(ctx context.Context, p string) (*PushResult, error) {
	name := filepath.Base(p)
	if _, err := ParseName(name); err != nil {
		return nil, err
	}
	async := c.async(p)
	ah := c.ahead(filepath.Dir(p))
	if async && c.backgroundAllowed() {
		c.startsPusher(ah)
	}
	if async {
		if r := NotedPush(ah.Spool, name, p); r != nil || ah.Spawn != nil {
			// Pushed ahead, or the pusher's to push: no store to open.
			var err error
			if r == nil {
				r, err = ah.Push(ctx, name, p)
			}
			switch {
			case errors.Is(err, errNotReady):
				async = false
			case !errors.Is(err, ErrSpool):
				return r, err
			default:
				c.spoolUnusable(name, err)
				async = false
			}
		}
	}
	ar, done, err := c.Open(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if async {
		ah.use(ar)
		r, err := ah.Push(ctx, name, p)
		if !errors.Is(err, ErrSpool) {
			return r, err
		}
		c.spoolUnusable(name, err)
	}
	r, err := ar.Push(ctx, p)
	if err == nil && c.Pushed != nil {
		c.Pushed(r)
	}
	return r, err
}

// async reports whether the push of p goes through the spool: push {
// async = true }, and a file PostgreSQL marked ready (any other is pushed
// as it is).
func (c *Command) async(p string) bool {
	if !c.Settings.Async {
		return false
	}
	_, err := os.Stat(filepath.Join(filepath.Dir(p), "archive_status", filepath.Base(p)+".ready"))
	return err == nil
}

// Answer returns the result of a push of p that the spool answers without
// a store: a file an earlier push or the background pusher noted, or,
// where a background pusher may run, one the pusher notes within the push
// timeout; with Spawn set, it starts the pusher when none runs (else it
// starts nothing). nil leaves the push to Push (and is what a program
// without the stores hands over: pipe-wal), which also reports a failure
// the pusher noted.
func (c *Command) Answer(ctx context.Context, p string) *PushResult {
	name := filepath.Base(p)
	if _, err := ParseName(name); err != nil || !c.async(p) {
		return nil
	}
	spool := c.inData(c.Settings.PushSpool)
	if !c.backgroundAllowed() {
		// No pusher to wait for: an earlier push sent the file ahead
		// (PostgreSQL runs one archive_command at a time), or Push does.
		return NotedPush(spool, name, p)
	}
	if c.Spawn != nil {
		ah := c.ahead(filepath.Dir(p))
		c.startsPusher(ah)
		r, err := ah.wait(ctx, name, p)
		if err != nil {
			return nil
		}
		return r
	}
	return WaitNoted(ctx, spool, name, p, c.Settings.PushTimeout)
}

// spoolUnusable says why a push that would have been pushed ahead, or
// waited for the background pusher, pushes its file itself.
func (c *Command) spoolUnusable(name string, err error) {
	c.Log.Warn("pushing the file itself, without the spool: "+err.Error(), "file", name)
}

// RunPusher is the background pusher that Push starts: it pushes ready
// files until none has been ready for PusherIdle. Its error is for its
// log only: the process exits 0 whatever happens, since a postmaster
// that reaps it as an orphan restarts the server for any other status.
func (c *Command) RunPusher(ctx context.Context) error {
	ar, done, err := c.Open(ctx)
	if err != nil {
		return err
	}
	defer done()
	ah := c.ahead(c.inData("pg_wal"))
	ah.use(ar)
	if err := ah.Run(ctx); err != nil && !errors.Is(err, ErrBusy) && ctx.Err() == nil {
		return err
	}
	return nil
}

// FetchBackoff is the wait between fetch attempts: from half a second,
// doubling, at most 10 s apart.
func FetchBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 500 * time.Millisecond
	b.MaxInterval = 10 * time.Second
	b.MaxElapsedTime = 0 // WithMaxRetries bounds it
	return b
}

// Fetch restores the archived file name to dest as restore_command does:
// a segment from the prefetch spool when it is there (no store opened),
// else from the store, trying a failure again Settings.Retries times;
// then it has the next segments prefetched, by a background prefetcher
// where one may run, else itself. It returns where the file came from
// ("spool" or "store"). ErrNotArchived means the end of the archive;
// any other error must stop recovery.
func (c *Command) Fetch(ctx context.Context, name, dest string) (string, error) {
	file, err := ParseName(name)
	if err != nil {
		return "", err
	}
	pf := c.prefetch()
	// The spool first, without the store: the cluster is the archive's
	// system_identifier or pg_control's.
	prefetch := c.Settings.Prefetch > 0 && file.Kind == Segment
	sysid := c.Settings.SystemID
	if prefetch && sysid == 0 {
		if sysid, err = DataDirSystemID(c.DataDir); err != nil {
			prefetch = false // no spool without knowing the cluster; the store's fetch says why
		}
	}
	from := "spool"
	took := false
	if prefetch {
		if took, err = pf.Wait(ctx, sysid, name, dest); err != nil {
			c.Log.Warn("the prefetch spool", "error", err)
		}
	}
	var ar *Archive
	if !took {
		from = "store"
		var done func()
		if ar, done, err = c.Open(ctx); err != nil {
			return "", err
		}
		defer done()
		if err := c.fetchRetrying(ctx, ar, name, dest); err != nil {
			return "", err
		}
	}
	if c.Fetched != nil {
		c.Fetched(from)
	}
	if prefetch && !pf.Running() {
		c.prefetchNext(ctx, pf, ar, sysid, name)
	}
	return from, nil
}

// AnswerFetch restores the segment name to dest from the prefetch spool
// when the spool is all a fetch needs: the segment is spooled or a
// prefetcher brings it, and the segments after it need nothing more (a
// prefetcher runs, none is missing, or, where no background process may
// run, no more than half are). With Spawn set, where a background process
// may run, it starts the prefetcher when none runs, and a segment not
// spooled is the first one it brings: so recovery's first fetch is not a
// pipe beside the prefetcher it starts. It opens no store; false leaves
// the fetch to Fetch (and is what a program without the stores hands
// over: pipe-wal), which also says why a segment could not be brought.
func (c *Command) AnswerFetch(ctx context.Context, name, dest string) bool {
	file, err := ParseName(name)
	if err != nil || c.Settings.Prefetch == 0 || file.Kind != Segment {
		return false
	}
	sysid := c.Settings.SystemID
	if sysid == 0 {
		if sysid, err = DataDirSystemID(c.DataDir); err != nil {
			return false
		}
	}
	pf := c.prefetch()
	next := len(pf.Next(sysid, name))
	settled := next == 0 || (!c.backgroundAllowed() && next <= c.Settings.Prefetch/2)
	if settled || pf.Running() {
		took, err := pf.Wait(ctx, sysid, name, dest)
		return err == nil && took
	}
	if c.Spawn == nil || !c.backgroundAllowed() {
		return false
	}
	if took, err := pf.take(sysid, name, dest); err != nil {
		return false
	} else if took {
		pf.note(sysid, name)
		c.startPrefetcher(pf, name) // the next fetch starts it if this one cannot
		return true
	}
	prev, err := PreviousSegment(name, c.Settings.SegmentSize)
	if err != nil || pf.foundMissing(sysid, name) {
		return false // pipe fetches it itself, and starts the prefetcher when it is archived
	}
	pf.note(sysid, prev) // recovery's position for the prefetcher: not one left from an earlier recovery
	exited := c.startPrefetcher(pf, prev)
	if exited == nil {
		return false
	}
	gone := func() bool {
		select {
		case <-exited:
			return true
		default:
			return false
		}
	}
	took, err := pf.await(ctx, sysid, name, dest, gone)
	return err == nil && took
}

// startPrefetcher starts the background prefetcher for the segments after
// name; it returns the prefetcher's exit, nil if it could not start.
func (c *Command) startPrefetcher(pf *Prefetch, name string) <-chan struct{} {
	args := append([]string{"wal", "fetch", "--prefetch-after", name}, c.BackgroundArgs...)
	exited, err := c.Spawn(args, filepath.Join(pf.Spool, "prefetch.log"))
	if err != nil {
		c.Log.Warn("starting the background prefetcher", "error", err)
		return nil
	}
	return exited
}

// fetchRetrying fetches name from the store, trying a failure again
// Settings.Retries times (a file not archived is no failure, and a file
// no trusted key signed fails at once).
func (c *Command) fetchRetrying(ctx context.Context, ar *Archive, name, dest string) error {
	return backoff.Retry(func() error {
		err := ar.Fetch(ctx, name, dest)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ErrNotArchived), errors.Is(err, ErrUntrusted), ctx.Err() != nil:
			return backoff.Permanent(err) // another try finds the same
		}
		if c.Fetched != nil {
			c.Fetched("")
		}
		c.Log.Warn("fetch failed; trying again", "file", name, "error", err)
		return err
	}, backoff.WithContext(backoff.WithMaxRetries(FetchBackoff(), uint64(c.Settings.Retries)), ctx))
}

// prefetch is the archive's prefetch spool.
func (c *Command) prefetch() *Prefetch {
	return &Prefetch{Spool: c.inData(c.Settings.FetchSpool), Ahead: c.Settings.Prefetch, SegmentSize: c.Settings.SegmentSize, Log: c.Log}
}

// prefetchNext has the segments after name brought into the spool: by a
// background prefetcher where one may run, else, when half of them are
// missing, by this process, all at once, before it returns (nothing may
// outlive restore_command there). ar is the store if open already.
func (c *Command) prefetchNext(ctx context.Context, pf *Prefetch, ar *Archive, sysid uint64, name string) {
	next := len(pf.Next(sysid, name))
	switch {
	case c.backgroundAllowed() && next > 0:
		c.startPrefetcher(pf, name)
	case next > c.Settings.Prefetch/2:
		if ar == nil {
			var done func()
			var err error
			if ar, done, err = c.Open(ctx); err != nil {
				c.Log.Warn("prefetching", "error", err)
				return
			}
			defer done()
		}
		pf.Archive = ar
		pf.Batch(ctx, sysid, name)
	}
}

// RunPrefetcher is the background prefetcher that Fetch starts: it keeps
// the segments after those recovery asks for, from after on, spooled.
// Like RunPusher's, its error is for its log only.
func (c *Command) RunPrefetcher(ctx context.Context, after string) error {
	ar, done, err := c.Open(ctx)
	if err != nil {
		return err
	}
	defer done()
	pf := c.prefetch()
	pf.Archive = ar
	sysid, err := ar.FetchSystemID(ctx)
	if err == nil {
		err = pf.Run(ctx, sysid, after)
	}
	if err != nil && !errors.Is(err, ErrBusy) && ctx.Err() == nil {
		return fmt.Errorf("the background prefetcher: %w", err)
	}
	return nil
}
