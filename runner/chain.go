package runner

import (
	"context"
	"errors"
	"fmt"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// follow offers a source that can build on an earlier run (sdk.Chainer)
// the run it may build on: the newest complete run of the pipeline in
// its first store, if every store that keeps runs holds it and every run
// it needs. Otherwise the source hears why not, and takes a full run.
func (r *run) follow(ctx context.Context) error {
	c, ok := r.src.source.(sdk.Chainer)
	if !ok {
		return nil
	}
	parent, why := r.findParent(ctx)
	err := c.Follow(ctx, parent, why)
	if err != nil && parent != nil {
		// A parent the source cannot take (a listing too large for its
		// plugin, say) makes a full, not a failed run.
		r.o.Warn(fmt.Sprintf("source %s cannot build on run %s: %v; it takes a full", r.src.name, parent.RunID, err))
		err = c.Follow(ctx, nil, fmt.Sprintf("it could not take run %s: %v", parent.RunID, err))
	}
	if err != nil {
		return fmt.Errorf("source %s: %w", r.src.name, err)
	}
	return nil
}

// findParent is follow's search (see follow).
func (r *run) findParent(ctx context.Context) (*sdk.Parent, string) {
	var parent *sdk.Parent
	stores := 0
	for _, s := range r.sinks {
		st, ok := s.sink.(sdk.Storage)
		if !ok || !s.def.Stores() || !s.def.Key.UsesRunID() {
			continue
		}
		stores++
		root, err := RunsRoot(s.def.Key)
		if err != nil {
			return nil, fmt.Sprintf("sink %s: %v", s.name, err)
		}
		cat, err := catalog.Read(ctx, sinkStore{st: st, sink: s.sink, root: root})
		if err != nil {
			return nil, fmt.Sprintf("sink %s: reading its runs: %v", s.name, err)
		}
		if parent == nil {
			p, why := newestParent(cat, r.p.Name)
			if p == nil {
				return nil, fmt.Sprintf("sink %s: %s", s.name, why)
			}
			parent = p
		}
		// Every store gets the run: each must hold what it builds on.
		pr := cat.Run(parent.RunID)
		if pr == nil {
			return nil, fmt.Sprintf("sink %s lacks run %s, which the run would build on", s.name, parent.RunID)
		}
		if why := chainComplete(cat, pr); why != "" {
			return nil, fmt.Sprintf("sink %s: %s", s.name, why)
		}
	}
	if stores == 0 {
		return nil, "no sink keeps runs under their run id (a storage sink with ${run.id} in its path)"
	}
	return parent, ""
}

// newestParent returns the newest complete run of pipeline in cat, as a
// parent, or why there is none to build on.
func newestParent(cat *catalog.Catalog, pipeline string) (*sdk.Parent, string) {
	for _, run := range cat.Runs { // newest first
		m := run.Manifest
		if m.Pipeline != pipeline {
			continue
		}
		switch {
		case m.Partial():
			return nil, fmt.Sprintf("the newest run of pipeline %q, %s, is partial", pipeline, m.RunID)
		case m.Damaged():
			return nil, fmt.Sprintf("the newest run of pipeline %q, %s, is damaged (%s)", pipeline, m.RunID, m.Damage)
		}
		return &sdk.Parent{RunID: m.RunID, Finished: m.FinishedAt, Facts: m.Source, Listing: []byte(m.Listing)}, ""
	}
	return nil, fmt.Sprintf("it holds no earlier run of pipeline %q", pipeline)
}

// chainComplete says what keeps run r of cat from being built on: a run
// of its chain missing, or an object of one missing or of another size
// than its manifest says; "" when nothing does.
func chainComplete(cat *catalog.Catalog, r *catalog.Run) string {
	chain, err := cat.Chain(r)
	if err != nil {
		return err.Error()
	}
	sizes := make(map[string]int64, len(cat.Objects))
	for _, o := range cat.Objects {
		sizes[o.Key] = o.Size
	}
	for _, c := range chain {
		for _, o := range c.Manifest.Objects {
			k := c.ObjectKey(o)
			if size, ok := sizes[k]; !ok {
				return fmt.Sprintf("object %s of run %s is missing", k, c.Manifest.RunID)
			} else if size >= 0 && size != o.Size {
				return fmt.Sprintf("object %s of run %s holds %d bytes, not the %d its manifest records", k, c.Manifest.RunID, size, o.Size)
			}
		}
	}
	return ""
}

// listing is what the source left for a later run to build on (see
// sdk.Chainer), once it concluded.
func (r *run) listing() string {
	if c, ok := r.src.source.(sdk.Chainer); ok {
		return string(c.Listing())
	}
	return ""
}

// restoreChain restores run r's chain, newest first, into sinks that
// compose it (see sdk.Composer): one engine run per run of the chain, each
// as a restore of that run alone.
func (r *run) restoreChain(ctx context.Context, chain []*catalog.Run) error {
	var composers []sdk.Composer
	for _, s := range r.sinks {
		composers = append(composers, s.sink.(sdk.Composer)) // see chain
	}
	var results []*engine.Result
	var newest []engine.Stream
	for i, run := range chain {
		err := r.restoreLink(ctx, composers, chain, i, &results)
		if i == 0 && r.job != nil {
			newest = r.job.Streams
		}
		if err != nil {
			err = fmt.Errorf("run %s (%d of the %d its chain restores, newest first): %w", run.Manifest.RunID, i+1, len(chain), err)
			if i > 0 {
				// The engine took back this run's objects; the newest
				// run's, committed, go too, even after an interrupt:
				// nothing half-composed stays.
				err = errors.Join(err, r.takeBackNewest(context.WithoutCancel(ctx), newest))
			}
			return err
		}
	}
	r.rep.Result = engine.Join(results)
	r.rep.Chain = catalog.IDs(chain)
	return nil
}

// restoreLink restores run i of chain, as a restore of that run alone
// after the sinks heard which it is.
func (r *run) restoreLink(ctx context.Context, composers []sdk.Composer, chain []*catalog.Run, i int, results *[]*engine.Result) error {
	run := chain[i]
	if i > 0 {
		sp := &streamsPlan{}
		checked, err := checkSignature(ctx, r.src, run, sp, r.p.Trust, fmt.Sprintf("pipeline %q", r.p.Name), false, r.o.Warn)
		if err != nil {
			return fmt.Errorf("source %s: %w", r.src.name, err)
		}
		if err := fromManifest(ctx, r.p, r.src, checked, sp, false); err != nil {
			return err
		}
		r.sp = sp
	}
	for _, c := range composers {
		if err := c.Compose(ctx, i, len(chain), run.Manifest.RunID); err != nil {
			return err
		}
	}
	err := r.restoreRun(ctx)
	if r.rep.Result != nil {
		*results = append(*results, r.rep.Result)
	}
	return err
}

// takeBackNewest removes from the sinks what the restore of a chain's
// newest run, streams, committed.
func (r *run) takeBackNewest(ctx context.Context, streams []engine.Stream) error {
	var errs []error
	for i, s := range r.sinks {
		rm, ok := s.sink.(sdk.Remover)
		if !ok {
			continue
		}
		for _, st := range streams {
			if err := rm.Remove(ctx, st.Objects[i].Key); err != nil {
				errs = append(errs, fmt.Errorf("sink %s: taking back %s: %w", s.name, st.Objects[i].Key, err))
			}
		}
	}
	return errors.Join(errs...)
}

// chain returns the runs a restore reads, newest first: the run chosen
// and, when it builds on others, each of them back to its full.
func (r *run) chain() ([]*catalog.Run, error) {
	from := r.sp.from
	if from == nil || from.Parent() == "" {
		return []*catalog.Run{from}, nil
	}
	var composers, others []string
	for _, s := range r.sinks {
		if _, ok := s.sink.(sdk.Composer); ok {
			composers = append(composers, s.name)
		} else {
			others = append(others, s.name)
		}
	}
	switch {
	case len(composers) > 0 && len(others) > 0:
		return nil, fmt.Errorf("run %s builds on run %s: sink %s composes the chain and sink %s cannot; restore it into one kind at a time", from.Manifest.RunID, from.Parent(), composers[0], others[0])
	case len(others) > 0:
		// Into a folder, say: the run's own objects, as stored, for
		// tools that compose (pg_combinebackup).
		r.o.Warn(fmt.Sprintf("run %s builds on run %s: sink %s does not compose runs (postgres_basebackup does), so it gets this run alone, only what changed since its parent", from.Manifest.RunID, from.Parent(), others[0]))
		return []*catalog.Run{from}, nil
	}
	if r.sp.cat == nil {
		return nil, fmt.Errorf("run %s builds on run %s: point source %s at the folder or prefix that holds the pipeline's runs (not at one run's manifest), so that pipe finds every run it needs", from.Manifest.RunID, from.Parent(), r.src.name)
	}
	return r.sp.cat.Chain(from)
}
