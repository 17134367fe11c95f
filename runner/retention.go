package runner

import (
	"context"
	"fmt"
	"io"
	"path"
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
	Garbage     int      `json:"garbage_objects_deleted,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// garbageAge is how old an object that no manifest names must be before
// retention deletes it: younger ones may belong to a run still writing.
const garbageAge = 24 * time.Hour

// applyRetention deletes, on each storage sink with keep_last or
// keep_within, the runs of this pipeline that are neither the current one,
// nor among the newest keep_last, nor finished within keep_within; then the
// objects of failed runs that no manifest names once they are old. A run's
// manifest goes first, so a half-deleted run never looks restorable.
func applyRetention(ctx context.Context, pipeline, runID string, started time.Time, sinks []*endpoint, manifests map[int]string, warn func(string)) []RetentionReport {
	var out []RetentionReport
	for i, s := range sinks {
		mkey, ok := manifests[i]
		if !ok || (s.def.KeepLast == 0 && s.def.KeepWithin == 0) {
			continue
		}
		rep := RetentionReport{Sink: s.name}
		if err := retain(ctx, pipeline, runID, started, s.def, s.sink.(sdk.Storage), mkey, &rep); err != nil {
			rep.Error = err.Error()
			warn(fmt.Sprintf("sink %s: retention: %v; the backup itself is complete", s.name, err))
		}
		out = append(out, rep)
	}
	return out
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

func retain(ctx context.Context, pipeline, runID string, started time.Time, def *pipefile.Endpoint, st sdk.Storage, mkey string, rep *RetentionReport) error {
	i := strings.Index(mkey, runID)
	if i < 0 {
		return fmt.Errorf("the manifest key %s does not hold the run id", mkey)
	}
	store := sinkStore{st: st, sink: st.(sdk.Sink), root: mkey[:i]} // the runs of this sink live under it
	cat, err := catalog.Read(ctx, store)
	if err != nil {
		return err
	}
	if len(cat.Invalid) > 0 {
		// Its objects would look like leftovers: delete nothing.
		bad := cat.Invalid[0]
		return fmt.Errorf("manifest %s: %w; nothing was deleted (remove or repair it)", store.root+bad.Key, bad.Err)
	}
	now := time.Now()
	var drop []*catalog.Run
	keepKeys := map[string]bool{}
	n := 0
	for _, r := range cat.Runs {
		if r.Manifest.Pipeline != pipeline {
			continue
		}
		keep := r.Manifest.RunID == runID ||
			(def.KeepLast > 0 && n < def.KeepLast) ||
			(def.KeepWithin > 0 && now.Sub(r.Manifest.FinishedAt) <= def.KeepWithin)
		n++
		if keep {
			rep.Kept = append(rep.Kept, r.Manifest.RunID)
			for _, k := range r.Keys() {
				keepKeys[k] = true
			}
			continue
		}
		drop = append(drop, r)
	}
	for _, r := range drop {
		if err := store.Remove(ctx, r.Key); err != nil {
			return fmt.Errorf("removing run %s (manifest %s): %w", r.Manifest.RunID, store.root+r.Key, err)
		}
		for _, k := range r.Keys() {
			if keepKeys[k] {
				continue // a kept run names the same object
			}
			if err := store.Remove(ctx, k); err != nil {
				return fmt.Errorf("removing %s of run %s: %w", store.root+k, r.Manifest.RunID, err)
			}
		}
		rep.DeletedRuns = append(rep.DeletedRuns, r.Manifest.RunID)
	}
	if len(drop) > 0 {
		var keys []string
		for _, r := range drop {
			keys = append(keys, r.Key)
		}
		// The runs are gone whatever the index says; a stale index only
		// costs the next listing a few reads.
		_ = catalog.UpdateIndex(ctx, store, nil, keys)
	}
	// Leftovers of failed runs: named by no manifest, and from a run (or a
	// temporary file) well older than this one.
	for _, g := range cat.Incomplete {
		if g.RunID == runID {
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
			if started.Sub(t) < garbageAge {
				continue
			}
			if err := store.Remove(ctx, o.Key); err != nil {
				return fmt.Errorf("removing leftover %s: %w", store.root+o.Key, err)
			}
			rep.Garbage++
		}
	}
	return nil
}
