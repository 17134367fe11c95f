package wal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

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
	Log   *slog.Logger
}

const prefetchLock = "prefetch.lock"

func (pf *Prefetch) dir(sysid uint64) string {
	return filepath.Join(pf.Spool, fmt.Sprint(sysid))
}

// Take moves the spooled segment name to dest, if it is there, and drops
// the spooled segments before it: replay has passed them.
func (pf *Prefetch) Take(sysid uint64, name, dest string) (bool, error) {
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
	n, err := SegmentNumber(name, pf.Archive.SegmentSize)
	if err != nil {
		return nil
	}
	f, _ := ParseName(name)
	var out []string
	for i := 1; i <= pf.Ahead; i++ {
		next := SegmentName(f.Timeline, n+uint64(i), pf.Archive.SegmentSize)
		if _, err := os.Stat(filepath.Join(pf.dir(sysid), next)); err != nil {
			out = append(out, next)
		}
	}
	return out
}

// Running reports whether a prefetcher is at work.
func (pf *Prefetch) Running() bool { return locked(pf.Spool, prefetchLock) }

// Run fetches the segments after name into the spool, Ahead at once,
// until the first that is not archived. It returns ErrBusy when another
// prefetcher runs.
func (pf *Prefetch) Run(ctx context.Context, sysid uint64, name string) error {
	l, err := lock(pf.Spool, prefetchLock)
	if err != nil {
		return err
	}
	defer l.Close()
	dir := pf.dir(sysid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	removeTemps(dir)
	var g errgroup.Group
	g.SetLimit(max(pf.Ahead, 1))
	for _, next := range pf.Next(sysid, name) {
		g.Go(func() error {
			data, err := pf.Archive.fetch(ctx, sysid, next)
			switch {
			case errors.Is(err, ErrNotArchived):
				return nil // not yet: restore_command will look again
			case err != nil:
				if ctx.Err() == nil {
					pf.Log.Warn("prefetch failed; restore_command will fetch it itself", "file", next, "error", err)
				}
				return nil
			}
			return writeAtomic(filepath.Join(dir, next), data)
		})
	}
	return g.Wait()
}

// removeTemps removes what a killed prefetcher left half-written.
func removeTemps(dir string) {
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".pipe-tmp-") {
			_ = os.Remove(filepath.Join(dir, e.Name())) // best effort
		}
	}
}
