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
	"github.com/pipebackup/pipe/wal"
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

// Deletion is what DeleteRuns did (or, in a dry run, would do).
type Deletion struct {
	Runs    []string `json:"deleted_runs"`
	Objects int      `json:"deleted_leftover_objects,omitempty"`
	// Packs counts the packs of chunks no run names any more, deleted.
	Packs int `json:"deleted_packs,omitempty"`
	// Last are the runs deleted (or refused) that were the last complete
	// base backup of their cluster in the store.
	Last []LastBaseBackup `json:"last_base_backups,omitempty"`
}

// DeleteOptions say how DeleteRuns deletes.
type DeleteOptions struct {
	Now time.Time
	// Force deletes a cluster's last complete base backup too; without
	// it DeleteRuns refuses and deletes nothing.
	Force bool
	// DryRun decides and checks as a deletion would, and deletes nothing.
	DryRun bool
	// Archive names the WAL archive of the store's base backups, for
	// messages ("" when the file has none).
	Archive string
	// Chain deletes with each run every run that builds on it (see
	// sdk.Chainer); without it DeleteRuns refuses to orphan one.
	Chain bool
}

// LastBaseBackup is a complete base backup whose deletion leaves its
// cluster without one in the store: the WAL archived from its first
// segment on can then recover nothing, since recovery starts from a base
// backup and replays forward.
type LastBaseBackup struct {
	RunID    string `json:"run_id"`
	SystemID string `json:"system_identifier"`
	// First is the first segment the backup needs.
	First string `json:"first_segment"`
}

// Warning says what deleting l costs, for an archive called archive ("":
// none in the file).
func (l LastBaseBackup) Warning(archive string) string {
	what := "the store then holds no base backup of it to recover from"
	if archive != "" {
		what = fmt.Sprintf("without it the WAL of archive %q from %s on can recover nothing (recovery starts from a base backup and replays forward)", archive, l.First)
	}
	return fmt.Sprintf("run %s is the last complete base backup of cluster %s: %s", l.RunID, l.SystemID, what)
}

// lastBaseBackups returns, newest first, the complete base backup of each
// cluster that deleting drop would leave with none in the store cat
// lists: the newest of that cluster's that drop holds.
func lastBaseBackups(cat *catalog.Catalog, drop []*catalog.Run) []*catalog.Run {
	gone := map[string]bool{}
	for _, r := range drop {
		gone[r.Key] = true
	}
	stays := map[uint64]bool{}
	newest := map[uint64]*catalog.Run{}
	var order []uint64
	for _, r := range cat.Runs { // newest first
		rg, ok, err := wal.BackupRange(r.Manifest.Source)
		if !ok || err != nil || !rg.Complete() {
			continue
		}
		if !gone[r.Key] {
			stays[rg.SystemID] = true
		} else if newest[rg.SystemID] == nil {
			newest[rg.SystemID] = r
			order = append(order, rg.SystemID)
		}
	}
	var out []*catalog.Run
	for _, id := range order {
		if !stays[id] {
			out = append(out, newest[id])
		}
	}
	return out
}

// describeLast describes a run lastBaseBackups returned.
func describeLast(r *catalog.Run) LastBaseBackup {
	rg, _, _ := wal.BackupRange(r.Manifest.Source)
	first, _ := rg.Names()
	return LastBaseBackup{RunID: r.Manifest.RunID, SystemID: fmt.Sprint(rg.SystemID), First: first}
}

// DeleteRuns deletes runs by id: each complete run's manifest first, then
// its objects that no other run names; a run that did not finish, its
// objects, once it is old enough that nothing still writes it. It refuses
// to delete the last complete base backup of a cluster unless o.Force,
// as pgBackRest's expire never removes the last full backup: the WAL
// archive would serve nothing.
func DeleteRuns(ctx context.Context, s *Store, ids []string, o DeleteOptions) (*Deletion, error) {
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
		if age := o.Now.Sub(g.Started); age < garbageAge {
			return nil, fmt.Errorf("run %s has no manifest and started %s ago: it may still be writing; pipe deletes a run without a manifest once it is %s old", id, age.Round(time.Minute), garbageAge)
		}
		leftovers = append(leftovers, g.Objects...)
	}
	if drop, err = withDependents(cat, drop, o.Chain); err != nil {
		return nil, err
	}
	// Newest first: a deletion that stops part way never leaves a run
	// whose parent is gone.
	order := map[string]int{}
	for i, r := range cat.Runs {
		order[r.Key] = i
	}
	slices.SortStableFunc(drop, func(a, b *catalog.Run) int { return order[a.Key] - order[b.Key] })
	var pinned []string
	for _, r := range drop {
		if r.Pinned {
			pinned = append(pinned, r.Manifest.RunID)
		}
	}
	if len(pinned) > 0 && !o.Force {
		return nil, fmt.Errorf("run %s is pinned; nothing was deleted: unpin it first (pipe backups unpin), or pass --force", strings.Join(pinned, ", "))
	}
	d := &Deletion{Runs: []string{}}
	for _, r := range lastBaseBackups(cat, drop) {
		d.Last = append(d.Last, describeLast(r))
	}
	if len(d.Last) > 0 && !o.Force {
		var why []string
		for _, l := range d.Last {
			why = append(why, l.Warning(o.Archive))
		}
		return d, fmt.Errorf("%s; nothing was deleted: take a new base backup first, or pass --force to delete it anyway", strings.Join(why, "; "))
	}
	for _, r := range drop {
		l, err := heldBy(ctx, s, r.Key, r.Manifest.RunID, o.Now)
		if err != nil {
			return d, fmt.Errorf("run %s: %w; nothing was deleted", r.Manifest.RunID, err)
		}
		if l != nil {
			return d, fmt.Errorf("%s is locked by the store; nothing was deleted: it can be deleted after its lock ends (pipe verify --locks lists every run's)", l)
		}
	}
	if o.DryRun {
		for _, r := range drop {
			d.Runs = append(d.Runs, r.Manifest.RunID)
		}
		d.Objects = len(leftovers)
		return d, nil
	}
	del, err := deleteRuns(ctx, s, cat, drop, leftovers)
	del.Last = d.Last
	return del, err
}

// withDependents adds to drop the runs that build on one of them (see
// catalog.Dependents) when chain is set, and otherwise refuses to delete
// a run others need, naming them.
func withDependents(cat *catalog.Catalog, drop []*catalog.Run, chain bool) ([]*catalog.Run, error) {
	in := map[string]bool{}
	for _, r := range drop {
		in[r.Key] = true
	}
	out := drop
	for _, r := range drop {
		var orphans []*catalog.Run
		for _, d := range cat.Dependents(r.Manifest.RunID) {
			if !in[d.Key] {
				orphans = append(orphans, d)
			}
		}
		if len(orphans) == 0 {
			continue
		}
		if !chain {
			return nil, fmt.Errorf("run %s is needed by %s, which build on it (a restore of them needs every run back to their full); nothing was deleted: delete them with it (pipe backups delete --chain %s; --dry-run shows what goes), or delete the newer runs first", r.Manifest.RunID, catalog.RunIDs(orphans), r.Manifest.RunID)
		}
		for _, d := range orphans {
			in[d.Key] = true
			out = append(out, d)
		}
	}
	return out, nil
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
	rp, err := PlanRetention(cat, Keep{Pipeline: s.Pipeline, Rule: s.Def.Retention}, now)
	if err != nil {
		return nil, nil, err
	}
	if err := rp.HoldLocked(ctx, s, now); err != nil {
		return nil, nil, err
	}
	if err := rp.planPacks(ctx, s, now, s.Grace); err != nil {
		return nil, nil, err
	}
	if dryRun {
		return rp, nil, nil
	}
	d, err := ApplyRetention(ctx, s, rp)
	return rp, d, err
}

// RetentionAfterNext is what retention would delete after the pipeline's
// next successful run: the new run counts as the newest.
func RetentionAfterNext(ctx context.Context, s *Store, now time.Time) (*RetentionPlan, error) {
	cat, err := catalog.Read(ctx, s)
	if err != nil {
		return nil, err
	}
	return PlanRetention(cat, Keep{Pipeline: s.Pipeline, Rule: s.Def.Retention, Next: now}, now)
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
