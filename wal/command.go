package wal

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/pipebackup/pipe/wal/spool"
	"github.com/pipebackup/pipe/wal/walname"
)

// Command is what pipe wal push (archive_command) and pipe wal fetch
// (restore_command) do with one archive, apart from reading the pipeline
// file and printing: whether a file was pushed ahead already, whether a
// background pusher or prefetcher is started, when the store is opened
// (a push the spool answers needs none), and how failures are retried.
// The commands only parse their flags, build a Command and call it. What
// it finds in the spools without a store is spool.Command's.
type Command struct {
	spool.Command
	// Open opens the archive's store; the caller lets go of it with the
	// function it returns.
	Open func(ctx context.Context) (*Archive, func(), error)
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

// PusherIdle is how long the background pusher waits for a ready file
// before it exits.
const PusherIdle = 5 * time.Second

// ahead is the archive's pushing ahead, for files in walDir.
func (c *Command) ahead(walDir string) *Pusher {
	return &Pusher{Spool: c.InData(c.Settings.PushSpool), WalDir: walDir, Workers: c.Settings.Workers, MaxBacklog: c.Settings.MaxBacklog,
		Wait: c.Settings.PushTimeout, Idle: PusherIdle, Log: c.Log, Pushed: c.Pushed, Backlog: c.Backlog, Alert: c.BacklogAlert}
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
	if _, err := walname.ParseName(name); err != nil {
		return nil, err
	}
	async := c.Async(p)
	ah := c.ahead(filepath.Dir(p))
	if async && c.BackgroundAllowed() {
		ah.Spawn = c.PusherSpawn(ah.Spool) // the background pusher, started when none runs
	}
	if async {
		if r := ah.noted(name, p); r != nil || ah.Spawn != nil {
			// Pushed ahead, or the pusher's to push: no store to open.
			var err error
			if r == nil {
				r, err = ah.Push(ctx, name, p)
			}
			switch {
			case errors.Is(err, spool.ErrNotReady):
				async = false
			case !errors.Is(err, spool.ErrSpool):
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
		if !errors.Is(err, spool.ErrSpool) {
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
	ah := c.ahead(c.InData("pg_wal"))
	ah.use(ar)
	if err := ah.Run(ctx); err != nil && !errors.Is(err, spool.ErrBusy) && ctx.Err() == nil {
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
	file, err := walname.ParseName(name)
	if err != nil {
		return "", err
	}
	pf := c.prefetch()
	// The spool first, without the store: the cluster is the archive's
	// system_identifier or pg_control's.
	prefetch := c.Settings.Prefetch > 0 && file.Kind == walname.Segment
	sysid := c.Settings.SystemID
	if prefetch && sysid == 0 {
		if sysid, err = walname.DataDirSystemID(c.DataDir); err != nil {
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

// prefetch is the archive's prefetch spool, to fetch into.
func (c *Command) prefetch() *Prefetch {
	return &Prefetch{Prefetch: *c.Prefetch()}
}

// prefetchNext has the segments after name brought into the spool: by a
// background prefetcher where one may run, else, when the next one is
// not spooled (BatchDue), by this process, all at once, before it returns
// (nothing may outlive restore_command there). ar is the store if open
// already.
func (c *Command) prefetchNext(ctx context.Context, pf *Prefetch, ar *Archive, sysid uint64, name string) {
	switch {
	case c.BackgroundAllowed():
		if len(pf.Next(sysid, name)) > 0 {
			c.StartPrefetcher(&pf.Prefetch, name)
		}
	case c.BatchDue(&pf.Prefetch, sysid, name):
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
	if err != nil && !errors.Is(err, spool.ErrBusy) && ctx.Err() == nil {
		return fmt.Errorf("the background prefetcher: %w", err)
	}
	return nil
}
