package spool

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/pipebackup/pipe/wal/walname"
)

// Settings are an archive's settings for push and fetch.
type Settings struct {
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

// Command is what archive_command and restore_command find in the spools
// without a store: a file pushed ahead, a segment prefetched. wal's
// Command adds the store; pipe-wal answers with this one alone.
type Command struct {
	Settings Settings
	// DataDir is the data directory: where pg_control, pg_wal and the
	// spools are.
	DataDir string
	// Spawn starts pipe in the background with args (the background
	// pusher or prefetcher), its output appended to logPath. The channel
	// it returns is closed when the process exits.
	Spawn func(args []string, logPath string) (<-chan struct{}, error)
	// BackgroundArgs are the arguments that give a background process the
	// same archive as this one (file, --archive, --pgdata, --var).
	BackgroundArgs []string
	Log            *slog.Logger
}

// InData resolves a path an archive gives relative to the data
// directory.
func (c *Command) InData(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.DataDir, p)
}

// BackgroundAllowed reports whether the archive's background attribute
// lets a process outlive the command PostgreSQL runs, here.
func (c *Command) BackgroundAllowed() bool {
	ok, _ := Background(c.Settings.Background)
	return ok
}

// Async reports whether the push of p goes through the spool: push {
// async = true }, and a file PostgreSQL marked ready (any other is pushed
// as it is).
func (c *Command) Async(p string) bool {
	if !c.Settings.Async {
		return false
	}
	_, err := os.Stat(filepath.Join(filepath.Dir(p), "archive_status", filepath.Base(p)+".ready"))
	return err == nil
}

// PusherSpawn starts the background pusher for the push spool dir: pipe
// wal push --background with this archive's arguments.
func (c *Command) PusherSpawn(dir string) func() (<-chan struct{}, error) {
	args := append([]string{"wal", "push", "--background"}, c.BackgroundArgs...)
	return func() (<-chan struct{}, error) {
		return c.Spawn(args, filepath.Join(dir, "pusher.log"))
	}
}

// Answer returns the key of the object a push of p finds without a
// store: a file an earlier push or the background pusher noted, or,
// where a background pusher may run, one the pusher notes within the push
// timeout; with Spawn set, it starts the pusher when none runs (else it
// starts nothing). "" leaves the push to wal's Command.Push, which also
// reports a failure the pusher noted, and checks a note whose file's
// identity changed (Answer has no digest: ErrUnsure).
func (c *Command) Answer(ctx context.Context, p string) string {
	name := filepath.Base(p)
	if _, err := walname.ParseName(name); err != nil || !c.Async(p) {
		return ""
	}
	s := Push{Dir: c.InData(c.Settings.PushSpool)}
	if !c.BackgroundAllowed() {
		// No pusher to wait for: an earlier push sent the file ahead
		// (PostgreSQL runs one archive_command at a time), or Push does.
		key, _ := s.Noted(name, p)
		return key
	}
	if c.Spawn != nil {
		key, _ := s.Wait(ctx, name, p, c.Settings.PushTimeout, c.PusherSpawn(s.Dir))
		return key
	}
	return s.WaitNoted(ctx, name, p, c.Settings.PushTimeout)
}

// Prefetch is the archive's prefetch spool.
func (c *Command) Prefetch() *Prefetch {
	return &Prefetch{Spool: c.InData(c.Settings.FetchSpool), Ahead: c.Settings.Prefetch, SegmentSize: c.Settings.SegmentSize,
		Unfollowed: !c.BackgroundAllowed(), Log: c.Log}
}

// BatchDue reports whether restore_command, where it prefetches itself
// (no background process may run), fetches the segments after its own
// segment name: when the one right after it is missing from pf (Next
// with a window of one: neither spooled nor past the end of the archive
// a batch just found). Recovery waits for the same bytes however they
// are split, and each batch is a pipe that starts and a round of fetches
// whose last ones run alone: a recovery that takes the segments in order
// fetches a window of 64 in 4 batches for 256 segments, where fetching
// when half were missing took 8. A segment spooled further ahead (left
// by an earlier recovery, or a batch that failed in part) does not hold
// a batch back. It looks at one segment, not the window, on each of the
// hundreds of commands of a recovery.
func (c *Command) BatchDue(pf *Prefetch, sysid uint64, name string) bool {
	if c.BackgroundAllowed() {
		return false
	}
	one := *pf
	one.Ahead = 1
	return len(one.Next(sysid, name)) > 0
}

// AnswerFetch restores the segment name to dest from the prefetch spool
// when the spool is all a fetch needs: the segment is spooled or a
// prefetcher brings it, and the segments after it need nothing more (a
// prefetcher runs, none is missing, or, where no background process may
// run, the next one is spooled: BatchDue). With Spawn set, where a background process
// may run, it starts the prefetcher when none runs, and a segment not
// spooled is the first one it brings: so recovery's first fetch is not a
// pipe beside the prefetcher it starts. It opens no store; false leaves
// the fetch to wal's Command.Fetch (and is what pipe-wal hands over),
// which also says why a segment could not be brought.
func (c *Command) AnswerFetch(ctx context.Context, name, dest string) bool {
	file, err := walname.ParseName(name)
	if err != nil || c.Settings.Prefetch == 0 || file.Kind != walname.Segment {
		return false
	}
	sysid := c.Settings.SystemID
	if sysid == 0 {
		if sysid, err = walname.DataDirSystemID(c.DataDir); err != nil {
			return false
		}
	}
	pf := c.Prefetch()
	var settled bool
	if c.BackgroundAllowed() {
		settled = len(pf.Next(sysid, name)) == 0
	} else {
		settled = !c.BatchDue(pf, sysid, name)
	}
	if settled || pf.Running() {
		took, err := pf.Wait(ctx, sysid, name, dest)
		return err == nil && took
	}
	if c.Spawn == nil || !c.BackgroundAllowed() {
		return false
	}
	if took, err := pf.take(sysid, name, dest); err != nil {
		return false
	} else if took {
		pf.Note(sysid, name)
		c.StartPrefetcher(pf, name) // the next fetch starts it if this one cannot
		return true
	}
	prev, err := walname.PreviousSegment(name, c.Settings.SegmentSize)
	if err != nil || pf.FoundMissing(sysid, name) {
		return false // pipe fetches it itself, and starts the prefetcher when it is archived
	}
	pf.Note(sysid, prev) // recovery's position for the prefetcher: not one left from an earlier recovery
	exited := c.StartPrefetcher(pf, prev)
	if exited == nil {
		return false
	}
	took, err := pf.Await(ctx, sysid, name, dest, func() bool { return Exited(exited) })
	return err == nil && took
}

// StartPrefetcher starts the background prefetcher for the segments after
// name; it returns the prefetcher's exit, nil if it could not start.
func (c *Command) StartPrefetcher(pf *Prefetch, name string) <-chan struct{} {
	args := append([]string{"wal", "fetch", "--prefetch-after", name}, c.BackgroundArgs...)
	exited, err := c.Spawn(args, filepath.Join(pf.Spool, "prefetch.log"))
	if err != nil {
		c.Log.Warn("starting the background prefetcher", "error", err)
		return nil
	}
	return exited
}
