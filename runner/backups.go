package runner

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// ListRuns lists a store's runs, through its index. When the index was
// stale and the store is a sink's, it writes the index anew, so the next
// listing reads one object.
func ListRuns(ctx context.Context, s *Store) (*catalog.Listing, error) {
	l, err := catalog.List(ctx, s)
	if err != nil {
		return nil, err
	}
	if l.Stale && s.Writable() && len(l.Invalid) == 0 {
		ix := l.Index()
		if b, err := ix.Marshal(); err == nil {
			_ = s.Put(ctx, catalog.IndexName, b) // only speed is at stake
		}
	}
	return l, nil
}

// ReadRun reads a run's manifest, the truth, by run id.
func ReadRun(ctx context.Context, s *Store, id string) (*catalog.Run, *catalog.Catalog, error) {
	cat, err := catalog.Read(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	if r := cat.Run(id); r != nil {
		return r, cat, nil
	}
	for _, bad := range cat.Invalid {
		if strings.Contains(bad.Key, id) {
			return nil, cat, fmt.Errorf("run %s: its manifest %s is not valid: %w", id, bad.Key, bad.Err)
		}
	}
	return nil, cat, fmt.Errorf("%s holds no complete run %s (pipe backups lists its runs)", s.Where(), id)
}

// Deletion is what DeleteRuns did.
type Deletion struct {
	Runs    []string `json:"deleted_runs"`
	Objects int      `json:"deleted_leftover_objects,omitempty"`
}

// DeleteRuns deletes runs by id: each complete run's manifest first, then
// its objects that no other run names; a run that did not finish, its
// objects, once it is old enough that nothing still writes it.
func DeleteRuns(ctx context.Context, s *Store, ids []string, now time.Time) (*Deletion, error) {
	if !s.Writable() {
		return nil, fmt.Errorf("pipeline %q reads %s as a source, which cannot delete: name a pipeline whose sink it is", s.Pipeline, s.Where())
	}
	cat, err := catalog.Read(ctx, s)
	if err != nil {
		return nil, err
	}
	var drop []*catalog.Run
	var leftovers []sdk.ObjectInfo
	for _, id := range ids {
		if r := cat.Run(id); r != nil {
			drop = append(drop, r)
			continue
		}
		i := slices.IndexFunc(cat.Incomplete, func(g *catalog.Incomplete) bool { return g.RunID == id })
		if i < 0 {
			return nil, fmt.Errorf("%s holds no run %s (pipe backups lists its runs)", s.Where(), id)
		}
		g := cat.Incomplete[i]
		if age := now.Sub(g.Started); age < garbageAge {
			return nil, fmt.Errorf("run %s has no manifest and started %s ago: it may still be writing; pipe deletes a run without a manifest once it is %s old", id, age.Round(time.Minute), garbageAge)
		}
		leftovers = append(leftovers, g.Objects...)
	}
	deleted, n, err := deleteRuns(ctx, s, cat, drop, leftovers)
	return &Deletion{Runs: deleted, Objects: n}, err
}

// PruneStore applies a sink's retention now: the runs of the pipeline
// beyond keep_last and keep_within, and the leftovers of runs that did not
// finish, once old enough. With dryRun it only says what it would delete.
func PruneStore(ctx context.Context, s *Store, now time.Time, dryRun bool) (*RetentionPlan, *Deletion, error) {
	if !s.Writable() {
		return nil, nil, fmt.Errorf("pipeline %q reads %s as a source: prune needs the pipeline whose sink keeps the runs", s.Pipeline, s.Where())
	}
	cat, err := catalog.Read(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	rp, err := PlanRetention(cat, Keep{Pipeline: s.Pipeline, Last: s.Def.KeepLast, Within: s.Def.KeepWithin}, now)
	if err != nil {
		return nil, nil, err
	}
	if dryRun {
		return rp, nil, nil
	}
	deleted, n, err := ApplyRetention(ctx, s, rp)
	return rp, &Deletion{Runs: deleted, Objects: n}, err
}

// RetentionAfterNext is what retention would delete after the pipeline's
// next successful run: the new run counts as the newest.
func RetentionAfterNext(ctx context.Context, s *Store, now time.Time) (*RetentionPlan, error) {
	cat, err := catalog.Read(ctx, s)
	if err != nil {
		return nil, err
	}
	k := Keep{Pipeline: s.Pipeline, Last: s.Def.KeepLast, Within: s.Def.KeepWithin}
	if k.Last > 0 {
		k.Last-- // the next run takes one place
		if k.Last == 0 && k.Within == 0 {
			k.Within = -1 // keep none of the old ones (a negative window keeps nothing)
		}
	}
	return PlanRetention(cat, k, now)
}

// RunObjects lists a run's objects, for show: keys relative to the store.
type RunObject struct {
	manifest.Object
	// At is where the object is in the store.
	At string `json:"at"`
}

// Objects returns a run's objects with where they are, in stream order.
func Objects(r *catalog.Run) []RunObject {
	var out []RunObject
	for _, o := range r.Manifest.Objects {
		out = append(out, RunObject{Object: o, At: r.ObjectKey(o)})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Stream < out[j].Stream })
	return out
}
