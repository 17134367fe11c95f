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

// Run executes p: it configures the endpoints, lists the source's
// streams, decides the kind of run (see kind) and takes that kind's path.
func Run(ctx context.Context, p *plan.Pipeline, o Options) (*Report, error) {
	if o.Warn == nil {
		o.Warn = func(string) {}
	}
	r := &run{p: p, o: o, rep: &Report{Pipeline: p.Name, RunID: o.RunID, Restore: p.Restores(), Budget: p.Budget()}}
	src, sinks, err := configure(ctx, p, o.Registry, o.Source)
	if err != nil {
		return r.rep, err
	}
	defer closeAll(src, sinks)
	r.src, r.sinks = src, sinks
	if err := r.start(ctx); err != nil {
		return r.rep, err
	}
	switch r.kind {
	case backup:
		err = r.backup(ctx)
	case copyRun:
		err = r.copy(ctx)
	case restore:
		err = r.restore(ctx)
	case trial:
		err = r.trial(ctx)
	}
	return r.rep, err
}

// kind is what a run does. What the file says does not settle it: a
// pipeline without stages that reads a stored run through its manifest
// copies it into stores that keep runs and restores it anywhere else,
// which only the source's listing tells. So decide works it out once the
// source is listed, and each kind takes its own path through Run.
type kind int

const (
	// backup moves the source's streams through the stages into the
	// sinks; each store gets the run's manifest, last; then retention
	// deletes older runs (and, with a WAL archive, the WAL only they
	// needed). A base backup is a backup.
	backup kind = iota
	// copyRun moves a stored run, read through its manifest, unchanged
	// into stores that keep runs: a complete run there, under the same
	// id, whose manifest is the run's own with where the copy put its
	// objects.
	copyRun
	// restore decodes, or reads a run through its manifest without
	// copying it (see copies). It writes no manifest: neither a pipeline
	// that decodes nor one that reads a backup through its manifest (a
	// restore without stages, of a backup that had only a checksum,
	// would otherwise leave a manifest among the restored files, and a
	// copy of a compressed backup would get one that calls its objects
	// plain); and so no retention.
	restore
	// trial is pipe bench's backup (or copy): everything runs, then every
	// object is taken back; no manifest, no retention (see trial.go).
	trial
)

// run is one run of a pipeline on its way: what Run set up, and what its
// kind's path adds.
type run struct {
	p     *plan.Pipeline
	o     Options
	rep   *Report
	src   *endpoint
	sinks []*endpoint
	sp    *streamsPlan
	kind  kind
	// isolated: the run's streams stand alone (a cluster's databases):
	// one that fails does not stop the others.
	isolated  bool
	job       *engine.Job
	manifests map[int]string // the manifest's key, by storage sink
	started   time.Time
}

// start lists the source's streams, plans what the run reads and decides
// the run's kind.
func (r *run) start(ctx context.Context) error {
	if r.o.Trial {
		if err := checkTrialSinks(r.sinks); err != nil {
			return err
		}
	}
	if err := r.follow(ctx); err != nil {
		return err
	}
	infos, err := r.src.source.Streams(ctx)
	if err != nil {
		return fmt.Errorf("source %s: listing streams: %w", r.src.name, err)
	}
	copying := copies(r.p, r.sinks)
	if r.sp, err = planStreams(ctx, r.p, r.src, infos, selection(r.p, r.o.Select), copying, r.o.Warn); err != nil {
		return err
	}
	r.rep.ManifestRead, r.rep.SignedBy = r.sp.manifestKey, r.sp.signer
	return r.decide(copying)
}

// decide works out the run's kind, and whether its streams stand alone:
// the one place that does. A pipeline that decodes restores; one that
// reads a stored run through its manifest copies it when copying (see
// copies) and restores it otherwise; any other backs up; a trial (pipe
// bench) backs up or copies, and never restores. A restore's streams
// stand alone when the run's did; a backup's or a copy's when its source
// says so (see sdk.Independent); a trial's never.
func (r *run) decide(copying bool) error {
	p, sp := r.p, r.sp
	switch {
	case p.Restores() || (sp.from != nil && !copying):
		r.kind = restore
		r.isolated = sp.from != nil && sp.from.Manifest.Independent
	case sp.from != nil:
		r.kind, sp.copy = copyRun, true
		if err := copyRunKey(sp); err != nil {
			return err
		}
	}
	r.rep.Restore = r.kind == restore
	r.rep.Streams = len(sp.streams)
	if r.kind == restore && p.Sign != nil && sp.from != nil {
		r.o.Warn(fmt.Sprintf("pipeline %q restores run %s rather than copy it, and writes no manifest: its sign block signs nothing", p.Name, sp.from.Manifest.RunID))
	}
	switch {
	case r.o.Trial && r.kind == restore:
		return fmt.Errorf("pipeline %q restores: a trial run would overwrite what its sinks hold and then remove it; only backups can be tried", p.Name)
	case r.o.Trial:
		r.kind = trial
	case r.kind != restore:
		if ind, ok := r.src.source.(sdk.Independent); ok {
			r.isolated = ind.Independent()
		}
	}
	return nil
}

// copies reports whether the pipeline copies a run its source holds, if
// it reads one through its manifest: nothing transforms the run (no
// stage adds to its objects' names) and every sink keeps runs.
func copies(p *plan.Pipeline, sinks []*endpoint) bool {
	return !p.Restores() && p.Ext() == "" && storesRuns(sinks)
}

// backup takes a backup's path (see kind).
func (r *run) backup(ctx context.Context) (err error) {
	// A passphrase backup that keeps its objects in stores encrypts them
	// to a key of its own, wrapped by the passphrase beside the manifest:
	// one key derivation for the run instead of one per object.
	runKey, err := newRunKey(r.p, r.sinks)
	if err != nil {
		return err
	}
	if err := r.newJob(); err != nil {
		return err
	}
	dd, err := r.bindDedup(ctx)
	if err != nil {
		return err
	}
	if dd != nil {
		defer func() {
			if err != nil {
				dd.abort(ctx)
			}
		}()
	}
	if err := r.prepareSinks(ctx, nil); err != nil {
		return err
	}
	if runKey != nil {
		if err := runKey.write(ctx, r.sinks, r.manifests); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				runKey.remove(ctx, r.sinks)
			}
		}()
	}
	facts, err := r.describe(ctx)
	if err != nil {
		return err
	}
	r.started = time.Now().UTC()
	r.job.Finish = func(ctx context.Context, res *engine.Result) error {
		return r.finishStored(ctx, res, facts, func(ctx context.Context, facts map[string]string, wrote *[]wroteManifest) ([]string, error) {
			if dd != nil {
				if err := dd.close(ctx); err != nil {
					return nil, err
				}
			}
			out := outcome{failed: r.rep.Failed, independent: r.isolated, damage: r.rep.Damage, listing: r.listing(), dedup: dd.manifest()}
			return writeManifests(ctx, r.p, r.o.RunID, r.started, sourceFacts(r.src, facts), r.sinks, r.manifests, r.sp, res, runKey, out, wrote)
		})
	}
	if err := r.execute(ctx); err != nil {
		return err
	}
	r.retainRuns(ctx, r.p.Name, r.o.RunID)
	return nil
}

// copy takes a copy's path (see kind).
func (r *run) copy(ctx context.Context) (err error) {
	if err := r.newJob(); err != nil {
		return err
	}
	dc, err := r.bindDedupCopy(ctx)
	if err != nil {
		return err
	}
	if dc != nil {
		defer func() {
			if err != nil {
				dc.abort(ctx)
			}
		}()
	}
	if err := r.prepareSinks(ctx, nil); err != nil {
		return err
	}
	r.started = time.Now().UTC()
	r.job.Finish = func(ctx context.Context, res *engine.Result) error {
		return r.finishStored(ctx, res, nil, func(ctx context.Context, _ map[string]string, wrote *[]wroteManifest) ([]string, error) {
			if dc != nil {
				if err := dc.close(ctx); err != nil {
					return nil, err
				}
			}
			return writeCopies(ctx, r.p.Sign, r.sinks, r.manifests, r.sp, res, dc.manifest(), wrote, r.o.Warn)
		})
	}
	if err := r.execute(ctx); err != nil {
		return err
	}
	from := r.sp.from.Manifest
	r.retainRuns(ctx, from.Pipeline, from.RunID) // the copy is a run of the pipeline it copied
	return nil
}

// restore takes a restore's path (see kind). Of a run whose streams
// stand alone (a cluster's databases), it leaves out each group of
// which a stream failed in the backup (see skipIncomplete), and fails,
// once the rest is restored, for the failed streams a sink asked for. A
// run that builds on others restores with them (see restoreChain).
func (r *run) restore(ctx context.Context) error {
	if chain, err := r.chain(); err != nil || len(chain) > 1 {
		if err != nil {
			return err
		}
		return r.restoreChain(ctx, chain)
	}
	return r.restoreRun(ctx)
}

// restoreRun restores the run the streams plan reads (one run of a chain,
// or a run alone).
func (r *run) restoreRun(ctx context.Context) error {
	if err := r.newJob(); err != nil {
		return err
	}
	var failedInBackup []string
	if r.isolated {
		failed := r.sp.from.Manifest.Failed
		r.rep.Incomplete = skipIncomplete(r.job, r.sp, failed)
		r.rep.FailedInBackup = failed
		for _, f := range failed {
			failedInBackup = append(failedInBackup, f.Stream)
		}
	}
	if err := r.prepareSinks(ctx, failedInBackup); err != nil {
		return err
	}
	r.job.Finish = func(_ context.Context, res *engine.Result) error { return r.checkFailed(res) }
	return r.execute(ctx)
}

// trial takes a trial's path (see kind and trial.go): the backup's (or
// copy's) up to the engine, into keys that hold nothing yet.
func (r *run) trial(ctx context.Context) error {
	if r.p.Dedup() != nil {
		return fmt.Errorf("pipeline %q deduplicates: pipe bench does not try dedup pipelines (their packs would stay in the store); time a run instead", r.p.Name)
	}
	// Encrypted to a run key as the backup would be, which is not kept.
	if _, err := newRunKey(r.p, r.sinks); err != nil {
		return err
	}
	if err := r.newJob(); err != nil {
		return err
	}
	if err := checkTrialKeys(ctx, r.sinks, r.job); err != nil {
		return err
	}
	if err := r.prepareSinks(ctx, nil); err != nil {
		return err
	}
	// As the backup does: a source checks there what it will read (a
	// database that does not exist).
	if _, err := r.describe(ctx); err != nil {
		return err
	}
	r.job.Finish = func(ctx context.Context, res *engine.Result) error { return takeBackTrial(ctx, r.sinks, res) }
	return r.execute(ctx)
}

// newJob builds the engine's job: the stages (for the codec and frame
// size of what the source holds), the source, the sinks, every object's
// name and, for a run that stores, each store's manifest key.
func (r *run) newJob() error {
	job, err := r.p.Job(r.sp.codec, r.sp.frame)
	if err != nil {
		return err
	}
	job.Source = r.src.source
	job.Isolate = r.isolated
	for _, s := range r.sinks {
		job.Sinks = append(job.Sinks, engine.Sink{Name: s.name, Sink: s.sink, RateLimit: s.def.RateLimit})
	}
	r.job = job
	if r.manifests, err = nameObjects(r.sinks, r.sp, job, r.kind != restore); err != nil {
		return err
	}
	return r.dedupRestore()
}

// prepareSinks tells the sinks that want it every object of the run (and,
// restoring a partial run, the streams that failed in the backup), then
// drops the streams every sink declined.
func (r *run) prepareSinks(ctx context.Context, failedInBackup []string) error {
	var err error
	if r.rep.Missing, err = prepare(ctx, r.sinks, r.job, failedInBackup); err != nil {
		return err
	}
	r.rep.Skipped = skipDeclined(r.sinks, r.job, r.sp)
	r.rep.Streams = len(r.sp.streams)
	return nil
}

// execute runs the job through the engine, showing its progress, and
// returns the engine's error, or what became of the run's streams (see
// streamsError).
func (r *run) execute(ctx context.Context) error {
	e, err := engine.New(r.job)
	if err != nil {
		return err
	}
	if r.o.Progress != nil {
		r.o.Progress.Start(r.p.Name, r.sp.total, e)
	}
	res, err := e.Run(ctx)
	if r.o.Progress != nil {
		r.o.Progress.Stop()
	}
	r.rep.Result = res
	if err != nil {
		r.rep.Manifests, r.rep.Failed = nil, nil
		return fmt.Errorf("pipeline %q: %w", r.p.Name, err)
	}
	return r.streamsError(res)
}

// writeFunc writes a run's manifests, last, and returns their keys; wrote
// collects them for the stores' indexes.
type writeFunc func(ctx context.Context, facts map[string]string, wrote *[]wroteManifest) ([]string, error)

// finishStored is the job's Finish for a run that stores (a backup, a
// copy), once every stream ended: unless all failed, it takes what the
// source learned by reading (see conclude), writes the manifests with
// write and adds the run to the stores' indexes.
func (r *run) finishStored(ctx context.Context, res *engine.Result, facts map[string]string, write writeFunc) error {
	if err := r.checkFailed(res); err != nil {
		return err // nothing stored: no manifest
	}
	facts, err := r.conclude(ctx, facts)
	if err != nil {
		return err
	}
	var wrote []wroteManifest
	keys, err := write(ctx, facts, &wrote)
	r.rep.Manifests = keys
	if err == nil {
		updateIndexes(ctx, r.sinks, wrote, r.o.Warn)
	}
	return err
}

// checkFailed reports the streams that failed in an isolated run (see
// failedStreams), and fails when every stream did.
func (r *run) checkFailed(res *engine.Result) error {
	if r.rep.Failed = failedStreams(res, r.sp, r.o.Scrub); len(r.rep.Failed) == len(res.Streams) && len(res.Streams) > 0 {
		errs := make([]error, len(res.Streams))
		for i, s := range res.Streams {
			errs[i] = s.Err
		}
		return errors.Join(errs...)
	}
	return nil
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
