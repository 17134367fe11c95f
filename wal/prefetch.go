package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// Prefetch brings the segments that follow the one recovery asked for
// into a spool, several at once, so that replay does not wait for one
// process and one round trip per segment. Fetch (restore_command) takes a
// spooled segment with a rename; a background prefetcher (Run) fills the
// spool. Spooled files are checked (both digests) before they are renamed
// into the spool, and kept per system identifier.
type Prefetch struct {
	Archive *Archive
	// Spool is where prefetched segments wait: on pg_wal's file system,
	// so that taking one is a rename.
	Spool string
	// Ahead is how many segments after the one asked for to bring.
	Ahead int
	// SegmentSize is the cluster's.
	SegmentSize uint32
	Log         *slog.Logger
}

const prefetchLock = "prefetch.lock"

// dir is the spool's folder for a cluster, in this boot of the machine:
// spooled segments are not fsynced (fetch hands them over with a rename),
// so those of an earlier boot, which a crash may have torn, are never
// taken.
func (pf *Prefetch) dir(sysid uint64) string {
	return filepath.Join(pf.Spool, fmt.Sprintf("%d-%s", sysid, bootID()))
}

// bootID identifies this boot of the machine (Linux); "" elsewhere, where
// spooled segments are fsynced instead.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")
})

// fetching reports whether the prefetcher is fetching name now.
func (pf *Prefetch) fetching(sysid uint64, name string) bool {
	_, err := os.Stat(filepath.Join(pf.dir(sysid), name+fetchingExt))
	return err == nil && pf.Running()
}

// fetchingExt marks a segment the prefetcher is fetching; missingExt one
// it found not archived.
const (
	fetchingExt = ".fetching"
	missingExt  = ".missing"
	// endExt marks a segment a restore_command's prefetch (Batch) found
	// not archived: Next counts nothing from there on.
	endExt = ".end"
)

// endFresh is how long an end mark holds: the last commands of a
// recovery to the end of the archive come within it, and PostgreSQL asks
// again for a missing segment after 5 seconds
// (wal_retrieve_retry_interval).
const endFresh = 5 * time.Second

// foundMissing reports whether a prefetcher since the last one started
// found name not archived: the end of the archive, where recovery (a
// standby's, every few seconds) asks again and again. Starting a
// prefetcher for it would only find it missing again before pipe says so.
func (pf *Prefetch) foundMissing(sysid uint64, name string) bool {
	_, err := os.Stat(filepath.Join(pf.dir(sysid), name+missingExt))
	return err == nil
}

// Wait takes the spooled segment name like Take, and when a prefetcher
// is at work, waits for it to bring name rather than fetch it twice: it
// has followFor to start on it.
func (pf *Prefetch) Wait(ctx context.Context, sysid uint64, name, dest string) (bool, error) {
	deadline := time.Now().Add(followFor)
	return pf.await(ctx, sysid, name, dest, func() bool { return !pf.Running() || time.Now().After(deadline) })
}

// followFor is how long a prefetcher at work has to start on a segment
// recovery asks for: it follows recovery every 20 ms.
const followFor = 2 * time.Second

// await takes the spooled segment name to dest as soon as it is there, and
// notes recovery's position for the prefetcher that brings it: name once
// taken, the segment before while it waits, so that the prefetcher's
// window holds name. It returns false when no prefetcher will bring it:
// one fetched it and ended without it (not archived, or failed), or, while
// none has started on it, gone says that the prefetcher is gone or will
// not.
func (pf *Prefetch) await(ctx context.Context, sysid uint64, name, dest string, gone func() bool) (bool, error) {
	took, err := pf.take(sysid, name, dest)
	if !took && err == nil {
		if prev, perr := PreviousSegment(name, pf.SegmentSize); perr == nil {
			pf.note(sysid, prev)
		}
		for seen := false; !took && err == nil; took, err = pf.take(sysid, name, dest) {
			if pf.fetching(sysid, name) {
				seen = true
			} else if seen || gone() {
				took, err = pf.take(sysid, name, dest) // spooled right before
				break
			}
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	if took {
		pf.note(sysid, name)
	}
	return took, err
}

// positionFile is where fetch notes the newest segment recovery asked
// for, for the prefetcher to follow.
const positionFile = ".position"

// Take moves the spooled segment name to dest, if it is there, and drops
// the spooled segments before it: replay has passed them. It notes name as
// recovery's position, for the prefetcher.
func (pf *Prefetch) Take(sysid uint64, name, dest string) (bool, error) {
	pf.note(sysid, name)
	return pf.take(sysid, name, dest)
}

// note notes name as recovery's position, for the prefetcher to follow: a
// hint, without which it follows what was taken.
func (pf *Prefetch) note(sysid uint64, name string) {
	dir := pf.dir(sysid)
	if err := os.MkdirAll(dir, 0o700); err == nil {
		_ = writeAtomic(filepath.Join(dir, positionFile), []byte(name+"\n"), false) // a hint
	}
}

// take is Take without the note.
func (pf *Prefetch) take(sysid uint64, name, dest string) (bool, error) {
	dir := pf.dir(sysid)
	f, err := ParseName(name)
	if err != nil || f.Kind != Segment {
		return false, err
	}
	pf.dropBefore(dir, name)
	err = os.Rename(filepath.Join(dir, name), dest)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("taking %s from the spool: %w", name, err)
}

// dropBefore removes spooled segments of the timeline older than name.
func (pf *Prefetch) dropBefore(dir, name string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		n := e.Name()
		if len(n) == 24 && n[:8] == name[:8] && n[8:] < name[8:] {
			_ = os.Remove(filepath.Join(dir, n)) // best effort: the next Take tries again
		}
	}
}

// Next names the segments after name that are not spooled yet.
func (pf *Prefetch) Next(sysid uint64, name string) []string {
	n, err := SegmentNumber(name, pf.SegmentSize)
	if err != nil {
		return nil
	}
	f, _ := ParseName(name)
	var out []string
	dir := pf.dir(sysid)
	for i := 1; i <= pf.Ahead; i++ {
		next := SegmentName(f.Timeline, n+uint64(i), pf.SegmentSize)
		if _, err := os.Stat(filepath.Join(dir, next)); err == nil {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, next+endExt)); err == nil && time.Since(fi.ModTime()) < endFresh {
			// The end of the archive, as restore_command's prefetch found
			// it a moment ago: the segments from there on are not there
			// either. An older mark says nothing: the archive grows (a
			// standby's recovery follows it). A background prefetcher's
			// marks do not count here: fetch starts the next prefetcher
			// on what Next counts.
			break
		}
		out = append(out, next)
	}
	return out
}

// Running reports whether a prefetcher is at work.
func (pf *Prefetch) Running() bool { return locked(pf.Spool, prefetchLock) }

// prefetchIdle is how long the prefetcher waits for recovery to take a
// segment before it exits.
var prefetchIdle = 10 * time.Second

// Run is the prefetcher: it keeps the Ahead segments after recovery's
// position (the newest segment fetch was asked for, starting at name)
// spooled, Ahead fetches at once, following recovery as it takes them,
// until recovery has taken nothing for a while or asks past the end of
// the archive. It returns ErrBusy when another prefetcher runs.
func (pf *Prefetch) Run(ctx context.Context, sysid uint64, name string) error {
	l, dir, err := pf.hold(sysid)
	if err != nil {
		return err
	}
	defer l.Close()
	f, err := ParseName(name)
	if err != nil {
		return err
	}
	pos, err := SegmentNumber(name, pf.SegmentSize)
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
		if _, err := os.Stat(filepath.Join(r.dir, SegmentName(r.timeline, n, size))); err != nil {
			delete(r.spooled, n)
			if n > r.pos {
				r.pos, r.lastMove = n, time.Now()
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(r.dir, positionFile)); err == nil {
		p := strings.TrimSpace(string(b))
		n, err := SegmentNumber(p, size)
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
		seg := SegmentName(r.timeline, n, size)
		if r.inflight[n] || r.spooled[n] {
			continue
		}
		if _, err := os.Stat(filepath.Join(r.dir, seg)); err == nil {
			continue
		}
		r.inflight[n] = true
		marker := filepath.Join(r.dir, seg+fetchingExt)
		_ = os.WriteFile(marker, nil, 0o600) // a hint for fetch: wait rather than fetch it too
		go func() {
			err := r.pf.spool(ctx, r.sysid, r.dir, seg)
			if errors.Is(err, ErrNotArchived) {
				_ = os.WriteFile(filepath.Join(r.dir, seg+missingExt), nil, 0o600) // a hint, before the marker goes
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
		r.pf.Log.Warn("prefetch failed; restore_command will fetch it itself", "file", SegmentName(r.timeline, res.n, r.pf.SegmentSize), "error", res.err)
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

// spool fetches seg into the spool's folder dir.
func (pf *Prefetch) spool(ctx context.Context, sysid uint64, dir, seg string) error {
	// Durable only where the spool's folder cannot tell one boot from the
	// next (see dir).
	return pf.Archive.spoolTo(ctx, sysid, seg, filepath.Join(dir, seg), bootID() == "")
}

// Batch is prefetching where no process may outlive restore_command: it
// fetches the segments after name that are not spooled, oldest first,
// PrefetchAtOnce at once, and returns when each is spooled, found missing
// (the end of the archive) or failed (fetch tries it again itself). It
// does nothing while another process prefetches.
func (pf *Prefetch) Batch(ctx context.Context, sysid uint64, name string) {
	l, dir, err := pf.hold(sysid)
	if err != nil {
		if !errors.Is(err, ErrBusy) {
			pf.Log.Warn("prefetching", "error", err)
		}
		return
	}
	defer l.Close()
	var g errgroup.Group
	g.SetLimit(PrefetchAtOnce)
	for _, seg := range pf.Next(sysid, name) {
		g.Go(func() error {
			err := pf.spool(ctx, sysid, dir, seg)
			switch {
			case errors.Is(err, ErrNotArchived):
				// Next counts no further: near the end of the archive,
				// each restore_command takes its spooled segment rather
				// than look for those after the end again.
				_ = os.WriteFile(filepath.Join(dir, seg+endExt), nil, 0o600)
			case err != nil && ctx.Err() == nil:
				pf.Log.Warn("prefetch failed; restore_command will fetch it itself", "file", seg, "error", err)
			}
			return nil
		})
	}
	_ = g.Wait() // each failure was logged; fetch tries it again
}

// hold takes the spool for a prefetch (ErrBusy when another process
// prefetches) and readies the cluster's folder in it: what a killed
// prefetcher left half-written goes, and so do earlier boots' folders.
// Close the lock to let go.
func (pf *Prefetch) hold(sysid uint64) (*os.File, string, error) {
	l, err := lock(pf.Spool, prefetchLock)
	if err != nil {
		return nil, "", err
	}
	dir := pf.dir(sysid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		l.Close()
		return nil, "", err
	}
	removeTemps(dir)
	olds, _ := filepath.Glob(filepath.Join(pf.Spool, fmt.Sprintf("%d-*", sysid)))
	for _, o := range olds {
		if o != dir {
			_ = os.RemoveAll(o) // best effort: never taken anyway
		}
	}
	return l, dir, nil
}

// removeTemps removes what a killed prefetcher left half-written, and
// the marks of earlier prefetchers.
func removeTemps(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".pipe-tmp-") || strings.HasSuffix(n, fetchingExt) || strings.HasSuffix(n, missingExt) || strings.HasSuffix(n, endExt) {
			_ = os.Remove(filepath.Join(dir, e.Name())) // best effort
		}
	}
}
