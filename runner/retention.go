package runner

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// RetentionReport says what retention did on one sink.
type RetentionReport struct {
	Sink        string   `json:"sink"`
	Kept        []string `json:"kept_runs"`
	DeletedRuns []string `json:"deleted_runs,omitempty"`
	Garbage     int      `json:"garbage_objects_deleted,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// garbageAge is how old an object that no manifest names must be before
// retention deletes it: younger ones may belong to a run still writing.
const garbageAge = 24 * time.Hour

// runIDRE matches the run ids pipe makes (newRunID in the CLI).
var runIDRE = regexp.MustCompile(`(\d{8}T\d{6}Z)-[0-9a-f]{6}`)

// runTime returns when the run whose id appears in key started.
func runTime(key string) (time.Time, bool) {
	m := runIDRE.FindStringSubmatch(key)
	if m == nil {
		return time.Time{}, false
	}
	t, err := time.Parse("20060102T150405Z", m[1])
	return t, err == nil
}

// applyRetention deletes, on each storage sink with keep_last or
// keep_within, the runs of this pipeline that are neither the current one,
// nor among the newest keep_last, nor finished within keep_within; then the
// objects of failed runs that no manifest names once they are old. A run's
// manifest goes first, so a half-deleted run never looks restorable.
func applyRetention(ctx context.Context, p *plan.Pipeline, runID string, started time.Time, sinks []*endpoint, manifests map[int]string, warn func(string)) []RetentionReport {
	var out []RetentionReport
	for i, s := range sinks {
		mkey, ok := manifests[i]
		if !ok || (s.def.KeepLast == 0 && s.def.KeepWithin == 0) {
			continue
		}
		rep := RetentionReport{Sink: s.name}
		if err := retain(ctx, p.Name, runID, started, s.def, s.sink.(sdk.Storage), mkey, &rep); err != nil {
			rep.Error = err.Error()
			warn(fmt.Sprintf("sink %s: retention: %v; the backup itself is complete", s.name, err))
		}
		out = append(out, rep)
	}
	return out
}

type run struct {
	key string // the manifest's key
	m   *manifest.Manifest
}

func retain(ctx context.Context, pipeline, runID string, started time.Time, def *pipefile.Endpoint, st sdk.Storage, mkey string, rep *RetentionReport) error {
	i := strings.Index(mkey, runID)
	if i < 0 {
		return fmt.Errorf("the manifest key %s does not hold the run id", mkey)
	}
	root := mkey[:i] // the runs of this sink live under it
	objects, err := st.List(ctx, root)
	if err != nil {
		return fmt.Errorf("listing %s: %w", root, err)
	}
	var runs []run
	referenced := map[string]bool{}
	for _, o := range objects {
		if !pipefile.IsManifest(o.Key) {
			continue
		}
		m, err := readManifest(ctx, st, o.Key)
		if err != nil {
			return fmt.Errorf("reading manifest %s: %w", o.Key, err)
		}
		referenced[o.Key] = true
		for _, obj := range m.Objects {
			referenced[manifest.Resolve(o.Key, obj.Key)] = true
		}
		if m.Pipeline == pipeline {
			runs = append(runs, run{o.Key, m})
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].m.FinishedAt.After(runs[j].m.FinishedAt) })
	now := time.Now()
	var drop []run
	keepKeys := map[string]bool{}
	for n, r := range runs {
		keep := r.m.RunID == runID ||
			(def.KeepLast > 0 && n < def.KeepLast) ||
			(def.KeepWithin > 0 && now.Sub(r.m.FinishedAt) <= def.KeepWithin)
		if keep {
			rep.Kept = append(rep.Kept, r.m.RunID)
			for _, obj := range r.m.Objects {
				keepKeys[manifest.Resolve(r.key, obj.Key)] = true
			}
			continue
		}
		drop = append(drop, r)
	}
	for _, r := range drop {
		if err := st.Remove(ctx, r.key); err != nil {
			return fmt.Errorf("removing run %s (manifest %s): %w", r.m.RunID, r.key, err)
		}
		for _, obj := range r.m.Objects {
			k := manifest.Resolve(r.key, obj.Key)
			if keepKeys[k] {
				continue // a kept run names the same object
			}
			if err := st.Remove(ctx, k); err != nil {
				return fmt.Errorf("removing %s of run %s: %w", k, r.m.RunID, err)
			}
		}
		rep.DeletedRuns = append(rep.DeletedRuns, r.m.RunID)
	}
	// Leftovers of failed runs: named by no manifest, and from a run (or a
	// temporary file) well older than this one.
	for _, o := range objects {
		if referenced[o.Key] || strings.Contains(o.Key, runID) {
			continue
		}
		t, ok := runTime(o.Key)
		if !ok {
			if !strings.HasPrefix(path.Base(o.Key), ".pipe-tmp-") {
				continue // not ours to judge
			}
			t = o.Modified
		}
		if started.Sub(t) < garbageAge {
			continue
		}
		if err := st.Remove(ctx, o.Key); err != nil {
			return fmt.Errorf("removing leftover %s: %w", o.Key, err)
		}
		rep.Garbage++
	}
	return nil
}
