package spool

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

	"github.com/pipebackup/pipe/wal/walname"
)

// Prefetch is a prefetch spool: the segments that follow the one
// recovery asked for wait in it, brought several at once (by wal's
// Prefetch), so that replay does not wait for one process and one round
// trip per segment. restore_command takes a spooled segment with a
// rename. Spooled files are checked (both digests) before they are
// renamed into the spool, and kept per system identifier.
type Prefetch struct {
	// Spool is where prefetched segments wait: on pg_wal's file system,
	// so that taking one is a rename.
	Spool string
	// Ahead is how many segments after the one asked for to bring.
	Ahead int
	// SegmentSize is the cluster's.
	SegmentSize uint32
	// Unfollowed says that no background prefetcher may run (background
	// = "never", or PostgreSQL as PID 1): nothing reads recovery's
	// position, so fetch does not note it.
	Unfollowed bool
	Log        *slog.Logger
}

const PrefetchLock = "prefetch.lock"

// Dir is the spool's folder for a cluster, in this boot of the machine:
// spooled segments are not fsynced (fetch hands them over with a rename),
// so those of an earlier boot, which a crash may have torn, are never
// taken.
func (pf *Prefetch) Dir(sysid uint64) string {
	return filepath.Join(pf.Spool, fmt.Sprintf("%d-%s", sysid, BootID()))
}

// BootID identifies this boot of the machine (Linux); "" elsewhere, where
// spooled segments are fsynced instead.
var BootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")
})

// fetching reports whether the prefetcher is fetching name now.
func (pf *Prefetch) fetching(sysid uint64, name string) bool {
	_, err := os.Stat(filepath.Join(pf.Dir(sysid), name+FetchingExt))
	return err == nil && pf.Running()
}

// FetchingExt marks a segment the prefetcher is fetching; MissingExt one
// it found not archived.
const (
	FetchingExt = ".fetching"
	MissingExt  = ".missing"
	// EndExt marks a segment a restore_command's prefetch (Batch) found
	// not archived: Next counts nothing from there on.
	EndExt = ".end"
)

// EndFresh is how long an end mark holds: the last commands of a
// recovery to the end of the archive come within it, and PostgreSQL asks
// again for a missing segment after 5 seconds
// (wal_retrieve_retry_interval).
const EndFresh = 5 * time.Second

// FoundMissing reports whether a prefetcher since the last one started
// found name not archived: the end of the archive, where recovery (a
// standby's, every few seconds) asks again and again. Starting a
// prefetcher for it would only find it missing again before pipe says so.
func (pf *Prefetch) FoundMissing(sysid uint64, name string) bool {
	_, err := os.Stat(filepath.Join(pf.Dir(sysid), name+MissingExt))
	return err == nil
}

// Wait takes the spooled segment name like Take, and when a prefetcher
// is at work, waits for it to bring name rather than fetch it twice: it
// has followFor to start on it.
func (pf *Prefetch) Wait(ctx context.Context, sysid uint64, name, dest string) (bool, error) {
	deadline := time.Now().Add(followFor)
	return pf.Await(ctx, sysid, name, dest, func() bool { return !pf.Running() || time.Now().After(deadline) })
}

// followFor is how long a prefetcher at work has to start on a segment
// recovery asks for: it follows recovery every 20 ms.
const followFor = 2 * time.Second

// Await takes the spooled segment name to dest as soon as it is there, and
// notes recovery's position for the prefetcher that brings it: name once
// taken, the segment before while it waits, so that the prefetcher's
// window holds name. It returns false when no prefetcher will bring it:
// one fetched it and ended without it (not archived, or failed), or, while
// none has started on it, gone says that the prefetcher is gone or will
// not.
func (pf *Prefetch) Await(ctx context.Context, sysid uint64, name, dest string, gone func() bool) (bool, error) {
	took, err := pf.take(sysid, name, dest)
	if !took && err == nil {
		if prev, perr := walname.PreviousSegment(name, pf.SegmentSize); perr == nil {
			pf.Note(sysid, prev)
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
		pf.Note(sysid, name)
	}
	return took, err
}

// PositionFile is where fetch notes the newest segment recovery asked
// for, for the prefetcher to follow.
const PositionFile = ".position"

// Take moves the spooled segment name to dest, if it is there, and drops
// the spooled segments before it: replay has passed them. It notes name as
// recovery's position, for the prefetcher.
func (pf *Prefetch) Take(sysid uint64, name, dest string) (bool, error) {
	pf.Note(sysid, name)
	return pf.take(sysid, name, dest)
}

// Note notes name as recovery's position, for the prefetcher to follow: a
// hint, without which it follows what was taken.
func (pf *Prefetch) Note(sysid uint64, name string) {
	if pf.Unfollowed {
		return
	}
	dir := pf.Dir(sysid)
	if err := os.MkdirAll(dir, 0o700); err == nil {
		_ = WriteAtomic(filepath.Join(dir, PositionFile), []byte(name+"\n"), false) // a hint
	}
}

// take is Take without the note.
func (pf *Prefetch) take(sysid uint64, name, dest string) (bool, error) {
	dir := pf.Dir(sysid)
	f, err := walname.ParseName(name)
	if err != nil || f.Kind != walname.Segment {
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
	n, err := walname.SegmentNumber(name, pf.SegmentSize)
	if err != nil {
		return nil
	}
	f, _ := walname.ParseName(name)
	var out []string
	dir := pf.Dir(sysid)
	for i := 1; i <= pf.Ahead; i++ {
		next := walname.SegmentName(f.Timeline, n+uint64(i), pf.SegmentSize)
		if _, err := os.Stat(filepath.Join(dir, next)); err == nil {
			continue
		}
		if fi, err := os.Stat(filepath.Join(dir, next+EndExt)); err == nil && time.Since(fi.ModTime()) < EndFresh {
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
func (pf *Prefetch) Running() bool { return Locked(pf.Spool, PrefetchLock) }

// Hold takes the spool for a prefetch (ErrBusy when another process
// prefetches) and readies the cluster's folder in it: what a killed
// prefetcher left half-written goes, and so do earlier boots' folders.
// Close the lock to let go.
func (pf *Prefetch) Hold(sysid uint64) (*os.File, string, error) {
	l, err := Lock(pf.Spool, PrefetchLock)
	if err != nil {
		return nil, "", err
	}
	dir := pf.Dir(sysid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		l.Close()
		return nil, "", err
	}
	RemoveTemps(dir)
	olds, _ := filepath.Glob(filepath.Join(pf.Spool, fmt.Sprintf("%d-*", sysid)))
	for _, o := range olds {
		if o != dir {
			_ = os.RemoveAll(o) // best effort: never taken anyway
		}
	}
	return l, dir, nil
}

// RemoveTemps removes what a killed prefetcher left half-written, and
// the marks of earlier prefetchers.
func RemoveTemps(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if n := e.Name(); strings.HasPrefix(n, ".pipe-tmp-") || strings.HasSuffix(n, FetchingExt) || strings.HasSuffix(n, MissingExt) || strings.HasSuffix(n, EndExt) {
			_ = os.Remove(filepath.Join(dir, e.Name())) // best effort
		}
	}
}
