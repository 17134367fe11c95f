package runner

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Options configure a run.
type Options struct {
	RunID    string
	Registry *host.Registry
	// Progress, when set, shows the run as it goes.
	Progress Progress
	// Warn receives warnings (a manifest without digests, say).
	Warn func(string)
	// Trial makes a trial run (pipe bench, see trial.go): everything runs,
	// then every object is taken back; no manifest, no retention.
	Trial bool
	// Source, when set, is read instead of configuring p.Source's type
	// (pipe bench's generated data); p.Source still names it. Run closes
	// it if it is an io.Closer.
	Source sdk.Source
	// Select, where set, beats the storage source's choice of a run
	// (pipe run --run, --before).
	Select catalog.Selection
	// Scrub, when set, takes secrets out of a failed stream's error
	// before the manifest records it.
	Scrub func(string) string
	// WALArchive, when set, is the archive whose WAL the pipeline's base
	// backups need: retention removes from it what only the runs it
	// deleted needed.
	WALArchive *plan.Archive
}

// Progress shows a running pipeline.
type Progress interface {
	// Start is called once the streams are known; total is the bytes the
	// source will yield, or -1.
	Start(pipeline string, total int64, r *engine.Run)
	Stop()
}

// Run executes p.
func Run(ctx context.Context, p *plan.Pipeline, o Options) (rep *Report, err error) {
	if o.Warn == nil {
		o.Warn = func(string) {}
	}
	rep = &Report{Pipeline: p.Name, RunID: o.RunID, Restore: p.Restores(), Budget: p.Budget()}
	src, sinks, err := configure(ctx, p, o.Registry, o.Source)
	if err != nil {
		return rep, err
	}
	defer closeAll(src, sinks)
	if o.Trial {
		if err := checkTrialSinks(sinks); err != nil {
			return rep, err
		}
	}

	infos, err := src.source.Streams(ctx)
	if err != nil {
		return rep, fmt.Errorf("source %s: listing streams: %w", src.name, err)
	}
	copying := !p.Restores() && p.Ext() == "" && storesRuns(sinks)
	sp, err := planStreams(ctx, p, src, infos, selection(p, o.Select), copying, o.Warn)
	if err != nil {
		return rep, err
	}
	rep.ManifestRead = sp.manifestKey
	if sp.from != nil && copying {
		sp.copy = true
		if err := copyRunKey(sp); err != nil {
			return rep, err
		}
	}
	rep.Restore = p.Restores() || (sp.from != nil && !sp.copy)
	rep.Streams = len(sp.streams)
	if o.Trial && rep.Restore {
		return rep, fmt.Errorf("pipeline %q restores: a trial run would overwrite what its sinks hold and then remove it; only backups can be tried", p.Name)
	}

	// A passphrase backup that keeps its objects in stores encrypts them
	// to a key of its own, wrapped by the passphrase beside the manifest:
	// one key derivation for the run instead of one per object.
	var runKey *wrappedKey
	if !rep.Restore {
		if runKey, err = newRunKey(p, sinks); err != nil {
			return rep, err
		}
	}
	job, err := p.Job(sp.codec, sp.frame)
	if err != nil {
		return rep, err
	}
	job.Source = src.source
	if ind, ok := src.source.(sdk.Independent); ok && !rep.Restore && !o.Trial {
		job.Isolate = ind.Independent()
	}
	if rep.Restore && sp.from != nil && sp.from.Manifest.Independent {
		job.Isolate = true // a cluster's databases: one that fails does not stop the others
	}
	for _, s := range sinks {
		job.Sinks = append(job.Sinks, engine.Sink{Name: s.name, Sink: s.sink, RateLimit: s.def.RateLimit})
	}
	manifests, err := nameObjects(p, sinks, sp, job)
	if err != nil {
		return rep, err
	}
	if o.Trial {
		if err := checkTrialKeys(ctx, sinks, job); err != nil {
			return rep, err
		}
	}
	var failedInBackup []string
	if rep.Restore && sp.from != nil && sp.from.Manifest.Independent {
		rep.Incomplete = skipIncomplete(job, sp, sp.from.Manifest.Failed)
		rep.FailedInBackup = sp.from.Manifest.Failed
		for _, f := range rep.FailedInBackup {
			failedInBackup = append(failedInBackup, f.Stream)
		}
	}
	if rep.Missing, err = prepare(ctx, sinks, job, failedInBackup); err != nil {
		return rep, err
	}
	rep.Skipped = skipDeclined(sinks, job, sp)
	rep.Streams = len(sp.streams)
	if runKey != nil && !o.Trial {
		if err := runKey.write(ctx, sinks, manifests); err != nil {
			return rep, err
		}
		defer func() {
			if err != nil {
				runKey.remove(ctx, sinks)
			}
		}()
	}
	facts := map[string]string{}
	if d, ok := src.source.(sdk.Describer); ok {
		if facts, err = d.Describe(ctx); err != nil {
			return rep, fmt.Errorf("source %s: describing what it reads: %w", src.name, err)
		}
	}
	started := time.Now().UTC()
	job.Finish = func(ctx context.Context, res *engine.Result) error {
		if rep.Failed = failedStreams(res, sp, o.Scrub); len(rep.Failed) == len(res.Streams) && len(res.Streams) > 0 {
			errs := make([]error, len(res.Streams))
			for i, r := range res.Streams {
				errs[i] = r.Err
			}
			return errors.Join(errs...) // nothing stored: no manifest
		}
		if c, ok := src.source.(sdk.Concluder); ok {
			more, err := c.Conclude(ctx)
			if err != nil {
				return fmt.Errorf("source %s: concluding what it read: %w", src.name, err)
			}
			if d := more[sdk.FactDamage]; d != "" {
				// Stored all the same, and named: see sdk.FactDamage.
				if o.Scrub != nil {
					d = o.Scrub(d)
				}
				rep.Damage = oneLine(d)
				delete(more, sdk.FactDamage)
			}
			facts = joinFacts(facts, more)
		}
		var wrote []wroteManifest
		keys, err := writeManifests(ctx, p, o.RunID, started, sourceFacts(src, facts), sinks, manifests, sp, res, runKey, outcome{failed: rep.Failed, independent: job.Isolate, damage: rep.Damage}, &wrote)
		rep.Manifests = keys
		if err == nil {
			updateIndexes(ctx, sinks, wrote, o.Warn)
		}
		return err
	}
	if o.Trial {
		job.Finish = func(ctx context.Context, res *engine.Result) error { return takeBackTrial(ctx, sinks, res) }
	}
	defer func() {
		// Retention runs once the backup is complete (its manifest written),
		// never after a failure. A retention problem does not undo the
		// backup: it is reported.
		if err == nil && !o.Trial {
			pipeline, runID := p.Name, o.RunID
			if sp.copy { // the copy is a run of the pipeline it copied
				pipeline, runID = sp.from.Manifest.Pipeline, sp.from.Manifest.RunID
			}
			var kept []*catalog.Run
			rep.Retention, kept = applyRetention(ctx, pipeline, runID, started, sinks, manifests, o.Warn)
			if o.WALArchive != nil && len(rep.Retention) > 0 && !failedRetention(rep.Retention) {
				deleted := 0
				for _, r := range rep.Retention {
					deleted += len(r.DeletedRuns)
				}
				w, err := PruneWAL(ctx, o.WALArchive, o.Registry, kept, deleted, false)
				if err != nil {
					w.Error = err.Error()
					o.Warn(fmt.Sprintf("archive %q: removing the WAL archived before the oldest base backup kept: %v; the backup itself is complete", o.WALArchive.Name, err))
				}
				rep.WALRetention = w
			}
		}
	}()
	r, err := engine.New(job)
	if err != nil {
		return rep, err
	}
	if o.Progress != nil {
		o.Progress.Start(p.Name, sp.total, r)
	}
	res, err := r.Run(ctx)
	if o.Progress != nil {
		o.Progress.Stop()
	}
	rep.Result = res
	if err != nil {
		rep.Manifests, rep.Failed = nil, nil
		return rep, fmt.Errorf("pipeline %q: %w", p.Name, err)
	}
	var errs []error
	if len(rep.Failed) > 0 {
		// No retention after a partial run (see the deferred call).
		errs = append(errs, &PartialError{Pipeline: p.Name, Failed: rep.Failed, Stored: len(res.Streams) - len(rep.Failed)})
	}
	if rep.Damage != "" {
		// Nor after a damaged one.
		errs = append(errs, &DamagedError{Pipeline: p.Name, RunID: o.RunID, Damage: rep.Damage})
	}
	if len(rep.Missing) > 0 {
		me := &MissingError{Pipeline: p.Name, RunID: sp.from.Manifest.RunID, Restored: len(res.Streams) - len(rep.Failed)}
		asked := map[string]bool{}
		for _, m := range rep.Missing {
			asked[m] = true
		}
		for _, f := range rep.FailedInBackup {
			if asked[f.Stream] {
				me.Missing = append(me.Missing, f)
			}
		}
		errs = append(errs, me)
	}
	if len(errs) == 1 {
		return rep, errs[0]
	}
	return rep, errors.Join(errs...)
}

// storesRuns reports whether every sink keeps runs, each under its run's
// id (${run.id} in its path): a pipeline that reads a run unchanged into
// such sinks copies it, where into a plain folder it restores the run's
// files as they are stored.
func storesRuns(sinks []*endpoint) bool {
	for _, s := range sinks {
		if !s.def.Stores() || !s.def.Key.UsesRunID() {
			return false
		}
	}
	return len(sinks) > 0
}
