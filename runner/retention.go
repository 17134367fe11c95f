package runner

import (
	"context"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// RetentionReport says what retention did on one sink.
type RetentionReport struct {
	Sink        string   `json:"sink"`
	Kept        []string `json:"kept_runs"`
	DeletedRuns []string `json:"deleted_runs,omitempty"`
	// Locked are the runs retention would delete that the store still
	// locks: they wait for the next run or prune after their lock ends.
	Locked  []Locked `json:"locked_runs,omitempty"`
	Garbage int      `json:"garbage_objects_deleted,omitempty"`
	// Packs counts the packs of chunks no run names any more, deleted.
	Packs int    `json:"packs_deleted,omitempty"`
	Error string `json:"error,omitempty"`
}

// garbageAge is how old an object that no manifest names must be before
// retention deletes it: younger ones may belong to a run still writing.
const garbageAge = 24 * time.Hour

// retainRuns applies retention once a run that stores (a backup, a copy)
// is complete, never after a failure: on each sink, to the runs of
// pipeline but runID (see applyRetention); then, with a WAL archive,
// removes the WAL that only the runs it deleted needed. A retention
// problem does not undo the run: it is reported, and warned of.
func (r *run) retainRuns(ctx context.Context, pipeline, runID string) {
	var kept []*catalog.Run
	r.rep.Retention, kept = applyRetention(ctx, pipeline, runID, r.started, r.sinks, r.manifests, graceOf(r.p), r.o.Warn)
	a := r.o.WALArchive
	if a == nil || len(r.rep.Retention) == 0 || failedRetention(r.rep.Retention) {
		return
	}
	deleted := 0
	for _, rr := range r.rep.Retention {
		deleted += len(rr.DeletedRuns)
	}
	w, err := PruneWAL(ctx, a, r.o.Registry, kept, deleted, false)
	if err != nil {
		w.Error = err.Error()
		r.o.Warn(fmt.Sprintf("archive %q: removing the WAL archived before the oldest base backup kept: %v; the backup itself is complete", a.Name, err))
	}
	r.rep.WALRetention = w
}

// applyRetention deletes, on each storage sink with keep_last or
// keep_within, the runs of this pipeline that are neither the current one,
// nor among the newest keep_last, nor finished within keep_within; then the
// objects of failed runs that no manifest names once they are old. A run's
// manifest goes first, so a half-deleted run never looks restorable.
func applyRetention(ctx context.Context, pipeline, runID string, started time.Time, sinks []*endpoint, manifests map[int]string, grace time.Duration, warn func(string)) ([]RetentionReport, []*catalog.Run) {
	var out []RetentionReport
	var kept []*catalog.Run
	for i, s := range sinks {
		mkey, ok := manifests[i]
		if !ok || !s.def.Retention.Set() {
			continue
		}
		rep := RetentionReport{Sink: s.name}
		k, err := retain(ctx, pipeline, runID, started, s.def, s.sink.(sdk.Storage), mkey, grace, &rep)
		if err != nil {
			rep.Error = err.Error()
			warn(fmt.Sprintf("sink %s: retention: %v; the backup itself is complete", s.name, err))
		}
		kept = append(kept, k...)
		out = append(out, rep)
	}
	return out, kept
}

// sinkStore lets the catalog read what a storage sink holds under root
// (a folder of its keys, ending in "/", or "").
type sinkStore struct {
	st   sdk.Storage
	sink sdk.Sink // st, for Put
	root string
}

func (s sinkStore) List(ctx context.Context) ([]sdk.ObjectInfo, error) {
	objs, err := s.st.List(ctx, s.root)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", s.root, err)
	}
	out := objs[:0]
	for _, o := range objs {
		if k, ok := strings.CutPrefix(o.Key, s.root); ok && k != "" {
			o.Key = k
			out = append(out, o)
		}
	}
	return out, nil
}

func (s sinkStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.st.Open(ctx, s.root+key)
}

func (s sinkStore) Remove(ctx context.Context, key string) error { return s.st.Remove(ctx, s.root+key) }

// Put replaces the object at key (the index).
func (s sinkStore) Put(ctx context.Context, key string, b []byte) error {
	return replace(ctx, s.sink, s.root+key, b)
}

// retain applies one sink's retention and returns the runs it kept (none
// when it failed: nothing then may go with the runs it would drop).
func retain(ctx context.Context, pipeline, runID string, started time.Time, def *pipefile.Endpoint, st sdk.Storage, mkey string, grace time.Duration, rep *RetentionReport) ([]*catalog.Run, error) {
	i := strings.Index(mkey, runID)
	if i < 0 {
		return nil, fmt.Errorf("the manifest key %s does not hold the run id", mkey)
	}
	store := sinkStore{st: st, sink: st.(sdk.Sink), root: mkey[:i]} // the runs of this sink live under it
	cat, err := catalog.Read(ctx, store)
	if err != nil {
		return nil, err
	}
	rp, err := PlanRetention(cat, Keep{Pipeline: pipeline, Current: runID, Rule: def.Retention}, started)
	if err != nil {
		return nil, err
	}
	for _, r := range rp.Keep {
		rep.Kept = append(rep.Kept, r.Manifest.RunID)
	}
	if err := rp.HoldLocked(ctx, store, started); err != nil {
		return nil, err
	}
	if err := rp.planPacks(ctx, store, started, grace); err != nil {
		return nil, err
	}
	d, err := ApplyRetention(ctx, store, rp)
	rep.DeletedRuns, rep.Locked, rep.Garbage, rep.Packs = d.Runs, rp.Locked, d.Objects, d.Packs
	if err != nil {
		return nil, err
	}
	return rp.Standing(), nil
}

// Keep is a retention rule: of the runs of Pipeline, keep Current, the
// pinned ones and those Rule keeps (every run when it sets no rule).
type Keep struct {
	Pipeline string
	Current  string
	Rule     pipefile.Retention
	// Next, when set, counts a complete run that finished then as the
	// newest: what retention deletes after the next run.
	Next time.Time
}

// RetentionPlan is what retention keeps and deletes in a store.
type RetentionPlan struct {
	// Keep and Drop are the pipeline's complete runs, newest first.
	Keep, Drop []*catalog.Run
	// Garbage are objects of runs that did not finish, old enough that no
	// run still writes them (garbageAge), and temporary files as old.
	Garbage []sdk.ObjectInfo
	// Locked are the runs (and leftovers) the rule would delete that the
	// store still locks (see HoldLocked), LockedRuns those runs.
	Locked     []Locked
	LockedRuns []*catalog.Run
	// Held are runs in Keep that the rule alone would delete: the last
	// complete base backup of their cluster in the store, which retention
	// never deletes (pipe backups delete --force does).
	Held []*catalog.Run
	// Why says, by manifest key, which rules keep each run of Keep.
	Why map[string][]string
	// Packs is what becomes of a deduplicating store's packs: those no
	// run left names go (see packs.go).
	Packs *PacksPlan
	// cat is what the plan was made from: objects other runs name are not
	// deleted with a dropped run.
	cat *catalog.Catalog
}

// planPacks works out, once the runs to delete are known, which packs
// go with them, those the store locks kept.
func (rp *RetentionPlan) planPacks(ctx context.Context, w catalog.Writer, now time.Time, grace time.Duration) error {
	pp, err := planPacks(ctx, w, rp.cat, rp.Drop, now, grace)
	if err != nil {
		return fmt.Errorf("working out the packs no run names: %w; nothing was deleted", err)
	}
	rp.Packs = pp
	return rp.holdLockedPacks(ctx, w, now)
}

// PlanRetention decides what the rule k deletes from the store cat lists,
// at time now. A store with a manifest pipe refuses plans nothing: that
// run's objects would look like leftovers.
func PlanRetention(cat *catalog.Catalog, k Keep, now time.Time) (*RetentionPlan, error) {
	if len(cat.Invalid) > 0 {
		bad := cat.Invalid[0]
		return nil, fmt.Errorf("manifest %s: %w; nothing was deleted (remove or repair it)", bad.Key, bad.Err)
	}
	rp := &RetentionPlan{cat: cat, Why: map[string][]string{}}
	kr := k.keeper(now)
	for _, r := range cat.Runs {
		if r.Manifest.Pipeline != k.Pipeline {
			continue
		}
		if why := kr.why(r); len(why) > 0 {
			rp.Keep = append(rp.Keep, r)
			rp.Why[r.Key] = why
		} else {
			rp.Drop = append(rp.Drop, r)
		}
	}
	// A cluster's last complete base backup stays, whatever the rule
	// says (keep_within after a week without backups, say): without it
	// the WAL archive recovers nothing. pgBackRest's expire keeps the last
	// full backup likewise.
	if rp.Held = lastBaseBackups(cat, rp.Drop); len(rp.Held) > 0 {
		keep := map[string]bool{}
		for _, r := range append(rp.Keep, rp.Held...) {
			keep[r.Key] = true
		}
		for _, r := range rp.Held {
			rp.Why[r.Key] = []string{"the last complete base backup of its cluster"}
		}
		rp.Keep, rp.Drop = nil, nil
		for _, r := range cat.Runs { // newest first, as before
			switch {
			case r.Manifest.Pipeline != k.Pipeline:
			case keep[r.Key]:
				rp.Keep = append(rp.Keep, r)
			default:
				rp.Drop = append(rp.Drop, r)
			}
		}
	}
	rp.keepParents(rp.Keep)
	// Leftovers of failed runs: named by no manifest, and from a run (or a
	// temporary file) well older than now.
	for _, g := range cat.Incomplete {
		if g.RunID == k.Current {
			continue
		}
		for _, o := range g.Objects {
			t := g.Started
			if g.RunID == "" {
				if !strings.HasPrefix(path.Base(o.Key), catalog.TempPrefix) {
					continue // not ours to judge
				}
				t = o.Modified
			}
			if now.Sub(t) >= garbageAge {
				rp.Garbage = append(rp.Garbage, o)
			}
		}
	}
	return rp, nil
}

// keepParents moves from Drop to Keep every run one of runs (kept, or
// held by the store's lock) builds on (see sdk.Chainer), back to its
// full: retention never orphans a run.
func (rp *RetentionPlan) keepParents(runs []*catalog.Run) {
	needed := map[string]string{} // run key → the kept run that needs it
	for _, r := range runs {
		chain, _ := rp.cat.Chain(r) // a broken chain keeps what it has
		for _, p := range chain[1:] {
			if _, ok := needed[p.Key]; !ok {
				needed[p.Key] = r.Manifest.RunID
			}
		}
	}
	if len(needed) == 0 {
		return
	}
	drop := rp.Drop[:0:0]
	for _, r := range rp.Drop {
		if by, ok := needed[r.Key]; ok {
			rp.Keep = append(rp.Keep, r)
			rp.Why[r.Key] = append(rp.Why[r.Key], "run "+by+" builds on it")
			continue
		}
		drop = append(drop, r)
	}
	rp.Drop = drop
	order := map[string]int{}
	for i, r := range rp.cat.Runs {
		order[r.Key] = i
	}
	slices.SortFunc(rp.Keep, func(a, b *catalog.Run) int { return order[a.Key] - order[b.Key] })
}

// ApplyRetention deletes what rp says: each run's manifest first (a
// half-deleted run never looks restorable), then its objects that no other
// run names, then the garbage; and keeps the store's index current. What
// the store locks must have been taken out of the plan first (HoldLocked).
func ApplyRetention(ctx context.Context, w catalog.Writer, rp *RetentionPlan) (*Deletion, error) {
	d, err := deleteRuns(ctx, w, rp.cat, rp.Drop, rp.Garbage)
	if err != nil {
		return d, err
	}
	d.Packs, err = applyPacks(ctx, w, rp.Packs, time.Now())
	return d, err
}

// deleteRuns deletes runs and leftover objects from a store cat lists.
func deleteRuns(ctx context.Context, w catalog.Writer, cat *catalog.Catalog, drop []*catalog.Run, garbage []sdk.ObjectInfo) (*Deletion, error) {
	d := &Deletion{Runs: []string{}}
	gone := map[string]bool{}
	for _, r := range drop {
		gone[r.Key] = true
	}
	named := map[string]bool{} // by the runs that stay
	for _, r := range cat.Runs {
		if !gone[r.Key] {
			for _, k := range r.Keys() {
				named[k] = true
			}
		}
	}
	var dropped []string
	defer func() {
		if len(dropped) > 0 {
			// The runs are gone whatever the index says; a stale index only
			// costs the next listing a few reads.
			_ = catalog.UpdateIndex(ctx, w, nil, dropped)
		}
	}()
	for _, r := range drop {
		if err := w.Remove(ctx, r.Key); err != nil {
			return d, fmt.Errorf("removing run %s (manifest %s): %w", r.Manifest.RunID, r.Key, err)
		}
		dropped = append(dropped, r.Key)
		for _, k := range r.Keys() {
			if named[k] {
				continue // a run that stays names the same object
			}
			if err := w.Remove(ctx, k); err != nil {
				return d, fmt.Errorf("removing %s of run %s: %w", k, r.Manifest.RunID, err)
			}
		}
		if r.Pinned { // last: a pin left behind is a leftover, removed in a day
			if err := w.Remove(ctx, catalog.PinKey(r.Key)); err != nil {
				return d, fmt.Errorf("removing the pin of run %s: %w", r.Manifest.RunID, err)
			}
		}
		d.Runs = append(d.Runs, r.Manifest.RunID)
	}
	for _, o := range garbage {
		if err := w.Remove(ctx, o.Key); err != nil {
			return d, fmt.Errorf("removing leftover %s: %w", o.Key, err)
		}
		d.Objects++
	}
	return d, nil
}
