package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/wal"
)

// WALPrune is what retention removed from a WAL archive.
type WALPrune struct {
	Archive string `json:"archive"`
	// Kept names, per cluster, the first segment kept: the oldest kept
	// base backup's first.
	Kept    map[string]string `json:"kept_from,omitempty"`
	Removed int               `json:"removed_files"`
	Error   string            `json:"error,omitempty"`
}

// KeptFrom names the first segment kept of each cluster, sorted.
func (w *WALPrune) KeptFrom() string {
	return strings.Join(slices.Sorted(maps.Values(w.Kept)), ", ")
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

// PruneWAL removes from the archive the WAL that only base backups no
// longer kept needed: per cluster, every segment (and .partial and .backup
// file) before the first segment of the oldest kept base backup. A cluster
// without a kept base backup keeps all its WAL, and history files always
// stay. With dryRun it only counts.
func PruneWAL(ctx context.Context, a *plan.Archive, reg *host.Registry, kept []*catalog.Run, dryRun bool) (*WALPrune, error) {
	rep := &WALPrune{Archive: a.Name, Kept: map[string]string{}}
	oldest := map[uint64]wal.Range{}
	for _, r := range kept {
		rg, ok, err := wal.BackupRange(r.Manifest.Source)
		if !ok || err != nil || !rg.Complete() {
			continue
		}
		if o, seen := oldest[rg.SystemID]; !seen || rg.Start < o.Start {
			oldest[rg.SystemID] = rg
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
		rep.Kept[fmt.Sprint(id)] = name
		for _, e := range l.Before(id, first, rg.SegmentSize) {
			if !dryRun {
				if err := ar.Store.Remove(ctx, e.Key); err != nil {
					return rep, fmt.Errorf("archive %q: removing %s: %w", a.Name, e.Key, err)
				}
			}
			rep.Removed++
		}
	}
	return rep, nil
}
