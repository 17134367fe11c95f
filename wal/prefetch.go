package wal

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pipebackup/pipe/wal/spool"
	"github.com/pipebackup/pipe/wal/walname"
	"golang.org/x/sync/errgroup"
)

// Prefetch brings the segments that follow the one recovery asked for
// into its spool (see spool.Prefetch), several at once, so that replay
// does not wait for one process and one round trip per segment: a
// background prefetcher (Run) or restore_command itself (Batch).
type Prefetch struct {
	spool.Prefetch
	Archive *Archive

	lists   listCache        // what the prefetch listed of the archive
	onFetch func(seg string) // when set, told of each fetch as it starts (tests)
}

// prefetchIdle is how long the prefetcher waits for recovery to take a
// segment before it exits.
var prefetchIdle = 10 * time.Second

// Run is the prefetcher: it keeps the Ahead segments after recovery's
// position (the newest segment fetch was asked for, starting at name)
// spooled, Ahead fetches at once, following recovery as it takes them,
// until recovery has taken nothing for a while or asks past the end of
// the archive. It returns ErrBusy when another prefetcher runs.
func (pf *Prefetch) Run(ctx context.Context, sysid uint64, name string) error {
	l, dir, err := pf.Hold(sysid)
	if err != nil {
		return err
	}
	defer l.Close()
	f, err := walname.ParseName(name)
	if err != nil {
		return err
	}
	pos, err := walname.SegmentNumber(name, pf.SegmentSize)
	if err != nil {
		return err
	}
	r := &prefetchRun{
		pf:       pf,
		sysid:    sysid,
		dir:      dir,
		name:     name,
		timeline: f.Timeline,
		pos:      pos,
		results:  make(chan prefetchResult),
		inflight: map[uint64]bool{},
		spooled:  map[uint64]bool{},
		lastMove: time.Now(),
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		r.follow()
		if r.finished() {
			return nil
		}
		r.start(ctx)
		select {
		case <-ctx.Done():
			r.drain()
			return nil
		case res := <-r.results:
			r.record(res)
		case <-tick.C:
		}
	}
}

// prefetchRun is the state of one Run.
type prefetchRun struct {
	pf       *Prefetch
	sysid    uint64
	dir      string
	name     string // the segment Run started at
	timeline uint32
	pos      uint64 // recovery's position
	results  chan prefetchResult
	inflight map[uint64]bool
	spooled  map[uint64]bool // by this prefetcher, not taken yet
	end      uint64          // the first segment not archived, 0 none yet
	left     bool            // recovery asked for another timeline
	lastMove time.Time       // when pos last moved
}

// prefetchResult is how the fetch of segment n ended.
type prefetchResult struct {
	n   uint64
	err error
}

// follow moves the position along with recovery: past the segments it
// took, and to the one it asked for last.
func (r *prefetchRun) follow() {
	size := r.pf.SegmentSize
	for n := range r.spooled {
		if _, err := os.Stat(filepath.Join(r.dir, walname.SegmentName(r.timeline, n, size))); err != nil {
			delete(r.spooled, n)
			if n > r.pos {
				r.pos, r.lastMove = n, time.Now()
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(r.dir, spool.PositionFile)); err == nil {
		p := strings.TrimSpace(string(b))
		n, err := walname.SegmentNumber(p, size)
		switch {
		case err != nil:
		case p[:8] != r.name[:8]:
			// Recovery moved to another timeline: what this prefetcher
			// brings is not asked for any more, and a fetch waiting for
			// it (Wait) should not wait.
			r.left = true
		case n > r.pos:
			r.pos, r.lastMove = n, time.Now()
		}
	}
}

// finished reports whether the prefetcher is done: nothing is in flight,
// and recovery reached the end of the archive, left the timeline or
// stopped moving.
func (r *prefetchRun) finished() bool {
	if (r.left || r.end != 0 && r.pos+1 >= r.end) && len(r.inflight) == 0 {
		return true // recovery reached the end of the archive, or left the timeline
	}
	return time.Since(r.lastMove) > prefetchIdle && len(r.inflight) == 0
}

// PrefetchAtOnce is the most segments a prefetch fetches at once,
// whatever prefetch says: enough to keep every decoder busy and hide the
// store's round trips. More would only have the segment recovery needs
// next wait behind the others: with prefetch = 64 fetched all at once,
// the first one arrived with the 64th (measured: recovery of 256 segments
// took 8.4 s instead of 6.8 s at prefetch = 8).
const PrefetchAtOnce = 8

// start fetches those of the Ahead segments after the position that are
// neither in flight nor spooled, oldest first, at most PrefetchAtOnce in
// flight, each in a goroutine that sends its result.
func (r *prefetchRun) start(ctx context.Context) {
	size := r.pf.SegmentSize
	for n := r.pos + 1; !r.left && len(r.inflight) < PrefetchAtOnce && n <= r.pos+uint64(r.pf.Ahead) && (r.end == 0 || n < r.end) && ctx.Err() == nil; n++ {
		seg := walname.SegmentName(r.timeline, n, size)
		if r.inflight[n] || r.spooled[n] {
			continue
		}
		if _, err := os.Stat(filepath.Join(r.dir, seg)); err == nil {
			continue
		}
		r.inflight[n] = true
		marker := filepath.Join(r.dir, seg+spool.FetchingExt)
		_ = os.WriteFile(marker, nil, 0o600) // a hint for fetch: wait rather than fetch it too
		go func() {
			err := r.pf.fetchInto(ctx, r.sysid, r.dir, seg)
			if errors.Is(err, ErrNotArchived) {
				_ = os.WriteFile(filepath.Join(r.dir, seg+spool.MissingExt), nil, 0o600) // a hint, before the marker goes
			}
			_ = os.Remove(marker)
			r.results <- prefetchResult{n, err}
		}()
	}
}

// record notes how a fetch ended: a segment not archived, or one that
// failed, ends what the prefetcher brings.
func (r *prefetchRun) record(res prefetchResult) {
	delete(r.inflight, res.n)
	switch {
	case res.err == nil:
		r.spooled[res.n] = true
	case errors.Is(res.err, ErrNotArchived):
		if r.end == 0 || res.n < r.end {
			r.end = res.n
		}
	default:
		r.pf.Log.Warn("prefetch failed; restore_command will fetch it itself", "file", walname.SegmentName(r.timeline, res.n, r.pf.SegmentSize), "error", res.err)
		if r.end == 0 || res.n < r.end {
			r.end = res.n // do not hammer a failing store; fetch retries
		}
	}
}

// drain waits for the fetches in flight to end.
func (r *prefetchRun) drain() {
	for len(r.inflight) > 0 {
		res := <-r.results
		delete(r.inflight, res.n)
	}
}

// fetchInto fetches seg into the spool's folder dir.
func (pf *Prefetch) fetchInto(ctx context.Context, sysid uint64, dir, seg string) error {
	if pf.onFetch != nil {
		pf.onFetch(seg)
	}
	// Durable only where the spool's folder cannot tell one boot from the
	// next (see dir).
	return pf.Archive.spoolTo(ctx, sysid, seg, filepath.Join(dir, seg), spool.BootID() == "", &pf.lists)
}

// Batch is prefetching where no process may outlive restore_command: it
// fetches the segments after name that are not spooled, oldest first,
// PrefetchAtOnce at once, and returns when each is spooled, found missing
// (the end of the archive) or failed (fetch tries it again itself). It
// does nothing while another process prefetches.
func (pf *Prefetch) Batch(ctx context.Context, sysid uint64, name string) {
	l, dir, err := pf.Hold(sysid)
	if err != nil {
		if !errors.Is(err, spool.ErrBusy) {
			pf.Log.Warn("prefetching", "error", err)
		}
		return
	}
	defer l.Close()
	var g errgroup.Group
	g.SetLimit(PrefetchAtOnce)
	for _, seg := range pf.Next(sysid, name) {
		g.Go(func() error {
			err := pf.fetchInto(ctx, sysid, dir, seg)
			switch {
			case errors.Is(err, ErrNotArchived):
				// Next counts no further: near the end of the archive,
				// each restore_command takes its spooled segment rather
				// than look for those after the end again.
				_ = os.WriteFile(filepath.Join(dir, seg+spool.EndExt), nil, 0o600)
			case err != nil && ctx.Err() == nil:
				pf.Log.Warn("prefetch failed; restore_command will fetch it itself", "file", seg, "error", err)
			}
			return nil
		})
	}
	_ = g.Wait() // each failure was logged; fetch tries it again
}
