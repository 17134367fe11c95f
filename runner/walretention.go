package runner

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/wal"
)

// WALPrune is what retention removed from a WAL archive: per cluster,
// every WAL file archived before the first segment of the oldest base
// backup kept, whether or not retention deleted a backup this time (the
// first base backup of a cluster removes the WAL archived before it).
type WALPrune struct {
	Archive string `json:"archive"`
	// Kept names, per cluster (by system identifier), the first segment
	// kept: the oldest kept base backup's first.
	Kept map[string]string `json:"kept_from,omitempty"`
	// Oldest names, per cluster, the run of that base backup.
	Oldest  map[string]string `json:"oldest_kept_run,omitempty"`
	Removed int               `json:"removed_files"`
	// DeletedBackups counts the base backups the same retention deleted
	// (or, in a dry run, would delete): with none, the files removed
	// were archived before every base backup kept, and no backup went.
	DeletedBackups int `json:"deleted_base_backups"`
	// Locked is the first file the prune would remove that the store
	// still locks, per cluster: it stops there (the files after it were
	// archived later, and are locked at least as long), and the next
	// prune goes on.
	Locked map[string]Locked `json:"locked,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// KeptFrom names the first segment kept of each cluster, sorted.
func (w *WALPrune) KeptFrom() string {
	return strings.Join(slices.Sorted(maps.Values(w.Kept)), ", ")
}

// Describe says what the prune removed, or would remove with dryRun,
// after a verb the caller writes ("removed", "would delete"): which
// files, before which segment of which run, and whether a base backup
// went with them. Without files to remove it says where the WAL kept
// starts, with no verb needed.
func (w *WALPrune) Describe(dryRun bool) string {
	ids := slices.Sorted(maps.Keys(w.Kept))
	var from []string
	for _, id := range ids {
		f := fmt.Sprintf("%s, the first segment of the oldest base backup kept (run %s)", w.Kept[id], w.Oldest[id])
		if len(ids) > 1 {
			f = fmt.Sprintf("%s, the first segment of the oldest base backup kept of cluster %s (run %s)", w.Kept[id], id, w.Oldest[id])
		}
		from = append(from, f)
	}
	before := strings.Join(from, "; and before ")
	if w.Removed == 0 && len(w.Locked) > 0 {
		return fmt.Sprintf("archive %q: no WAL file removed before %s%s", w.Archive, before, w.describeLocked())
	}
	if w.Removed == 0 {
		return fmt.Sprintf("archive %q holds no WAL archived before %s", w.Archive, before)
	}
	var backups string
	switch {
	case w.DeletedBackups == 0 && dryRun:
		backups = "no base backup would be deleted: these files are older than every base backup kept"
	case w.DeletedBackups == 0:
		backups = "no base backup was deleted: these files are older than every base backup kept"
	case dryRun:
		backups = fmt.Sprintf("retention would delete %s too", plan.Plural(w.DeletedBackups, "base backup"))
	default:
		backups = fmt.Sprintf("retention deleted %s too", plan.Plural(w.DeletedBackups, "base backup"))
	}
	return fmt.Sprintf("%s of archive %q archived before %s; %s%s", plan.Plural(w.Removed, "WAL file"), w.Archive, before, backups, w.describeLocked())
}

// describeLocked says where a prune stopped at a lock, "" when it did
// not.
func (w *WALPrune) describeLocked() string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(w.Locked)) {
		out = append(out, fmt.Sprintf("; stopped at %s, which the store locks: the files from it on wait", w.Locked[id]))
	}
	return strings.Join(out, "")
}

// failedRetention reports whether any sink's retention failed: then no
// WAL goes, since the runs it kept are not known.
func failedRetention(reps []RetentionReport) bool {
	for _, r := range reps {
		if r.Error != "" {
			return true
		}
	}
	return false
}

// PruneWAL removes from the archive the WAL that no kept base backup
// can replay: per cluster, every segment (and .partial and .backup file)
// before the first segment of the oldest kept base backup, as pgBackRest's
// expire does. That includes WAL archived before the cluster's first base
// backup, when deleted (the base backups the same retention deleted) is
// 0. A cluster without a kept base backup keeps all its WAL, and history
// files always stay. With dryRun it only counts.
func PruneWAL(ctx context.Context, a *plan.Archive, reg *host.Registry, kept []*catalog.Run, deleted int, dryRun bool) (*WALPrune, error) {
	rep := &WALPrune{Archive: a.Name, Kept: map[string]string{}, Oldest: map[string]string{}, DeletedBackups: deleted}
	oldest := map[uint64]wal.Range{}
	oldestRun := map[uint64]string{}
	for _, r := range kept {
		rg, ok, err := wal.BackupRange(r.Manifest.Source)
		if !ok || err != nil || !rg.Complete() {
			continue
		}
		if o, seen := oldest[rg.SystemID]; !seen || rg.Start < o.Start {
			oldest[rg.SystemID], oldestRun[rg.SystemID] = rg, r.Manifest.RunID
		}
	}
	if len(oldest) == 0 {
		return rep, nil
	}
	ar, done, err := OpenArchive(ctx, a, reg, "")
	if err != nil {
		return rep, err
	}
	defer done()
	l, err := ar.List(ctx)
	if err != nil {
		return rep, err
	}
	for id, rg := range oldest {
		first, _ := rg.Segments()
		name, _ := rg.Names()
		rep.Kept[fmt.Sprint(id)], rep.Oldest[fmt.Sprint(id)] = name, oldestRun[id]
		locker, _ := ar.Store.(sdk.Locker)
		for _, e := range l.Before(id, first, rg.SegmentSize) {
			if locker != nil {
				// Files were archived in order, each locked from then on:
				// the first one locked ends the prune of this cluster.
				lk, err := locker.ObjectLock(ctx, e.Key)
				if errors.Is(err, sdk.ErrNotFound) {
					continue // removed meanwhile (another prune)
				}
				if err != nil {
					return rep, fmt.Errorf("archive %q: asking whether %s is locked: %w", a.Name, e.Key, err)
				}
				if lk.Held(time.Now()) {
					if rep.Locked == nil {
						rep.Locked = map[string]Locked{}
					}
					rep.Locked[fmt.Sprint(id)] = Locked{Key: e.Key, Mode: lk.Mode, Until: lk.Until, LegalHold: lk.LegalHold}
					break
				}
			}
			if !dryRun {
				if err := ar.Store.Remove(ctx, e.Key); err != nil {
					return rep, fmt.Errorf("archive %q: removing %s: %w", a.Name, e.Key, err)
				}
			}
			rep.Removed++
		}
		if dryRun {
			continue
		}
		// Their names' claims (wal.ClaimExt) go last, once no object of
		// the name is left to keep the name for.
		if _, stopped := rep.Locked[fmt.Sprint(id)]; stopped {
			continue // the claims of the files that wait stay; the next prune removes them all
		}
		for _, c := range l.ClaimsBefore(id, first, rg.SegmentSize) {
			if err := ar.Store.Remove(ctx, c.Key); err != nil {
				return rep, fmt.Errorf("archive %q: removing %s: %w", a.Name, c.Key, err)
			}
		}
	}
	return rep, nil
}
