package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/internal/version"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/checksum"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
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

// Report describes a finished (or failed) run.
type Report struct {
	Pipeline string `json:"pipeline"`
	RunID    string `json:"run_id"`
	// Restore is true when the pipeline decodes, or reads a backup through
	// its manifest: it writes no manifest of its own.
	Restore bool `json:"restore"`
	// ManifestRead is the manifest a restore followed, if any.
	ManifestRead string `json:"manifest_read,omitempty"`
	// Manifests are the manifests written, one per storage sink.
	Manifests []string `json:"manifests_written,omitempty"`
	Streams   int      `json:"streams"`
	// Skipped names the streams of the run read no further because every
	// sink declined them (a cluster restore of some databases).
	Skipped []string `json:"skipped_streams,omitempty"`
	// Incomplete names the streams a restore left out because a stream
	// of their group failed in the backup (see sdk.Independent): a
	// database read table by table whose backup lacks a table.
	Incomplete []string       `json:"incomplete_streams,omitempty"`
	Result     *engine.Result `json:"-"`
	Budget     int64          `json:"memory_budget_bytes"`
	// Retention says what retention deleted, per sink.
	Retention []RetentionReport `json:"retention,omitempty"`
	// WALRetention says what retention removed from the WAL archive.
	WALRetention *WALPrune `json:"wal_retention,omitempty"`
	// Failed are the streams that failed in a run whose streams stand
	// alone (a cluster's databases): the others were stored.
	Failed []manifest.Failed `json:"failed_streams,omitempty"`
	// FailedInBackup are, for a restore of a partial run (see
	// sdk.Independent), the streams that failed in the backup: no object
	// holds them, and the restore names each.
	FailedInBackup []manifest.Failed `json:"failed_in_backup,omitempty"`
	// Missing names those of them the restore asked for (a sink that does
	// not choose asks for all): the run fails once the rest is restored.
	Missing []string `json:"missing_streams,omitempty"`
	// Damage is what the source found damaged in what it read (see
	// sdk.FactDamage): the run was stored, flagged, and fails.
	Damage string `json:"damage,omitempty"`
}

// MissingError is the error of a restore of a partial run that asked for
// streams the backup failed to store (a cluster's databases): the others
// were restored.
type MissingError struct {
	Pipeline, RunID string
	Missing         []manifest.Failed
	Restored        int
}

func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline %q: %s asked for not in run %s, which failed in the backup (the other %s restored; pipe backups show names what the run holds):",
		e.Pipeline, plan.Plural(len(e.Missing), "stream"), e.RunID, plan.Plural(e.Restored, "stream"))
	for _, f := range e.Missing {
		fmt.Fprintf(&b, "\n  %s: %s", f.Stream, f.Error)
	}
	return b.String()
}

// DamagedError is the error of a run that was stored whole although its
// source found what it read damaged (see sdk.FactDamage).
type DamagedError struct {
	Pipeline, RunID, Damage string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("pipeline %q: stored as run %s, but the source found what it read damaged: %s; the run is kept and flagged (pipe backups shows it, pipe verify fails on it): repair the damage on the server, and keep an older run that holds the damaged parts intact", e.Pipeline, e.RunID, e.Damage)
}

// PartialError is the error of a run whose streams stand alone when some
// of them failed: the others were stored, under a manifest that names
// the failed ones.
type PartialError struct {
	Pipeline string
	Failed   []manifest.Failed
	Stored   int
}

func (e *PartialError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline %q: %d of %d streams failed (the other %d were stored):", e.Pipeline, len(e.Failed), len(e.Failed)+e.Stored, e.Stored)
	for _, f := range e.Failed {
		fmt.Fprintf(&b, "\n  %s: %s", f.Stream, f.Error)
	}
	return b.String()
}

// DiagError carries diagnostics from configuring endpoints, with file
// positions.
type DiagError struct{ Diags hcl.Diagnostics }

func (e *DiagError) Error() string { return e.Diags.Error() }

type endpoint struct {
	def    *pipefile.Endpoint
	name   string
	source sdk.Source
	sink   sdk.Sink
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

// failedStreams are the streams of an isolated run that failed, by
// their names (a restore's, as its manifest has them), each with its
// error on one line, scrubbed of secrets and bounded for the manifest.
func failedStreams(res *engine.Result, sp *streamsPlan, scrub func(string) string) []manifest.Failed {
	var out []manifest.Failed
	for i, r := range res.Streams {
		if r.Committed || r.Err == nil {
			continue
		}
		name := r.Name
		if i < len(sp.streams) {
			name = sp.streams[i].name
		}
		msg := r.Err.Error()
		if scrub != nil {
			msg = scrub(msg)
		}
		out = append(out, manifest.Failed{Stream: name, Error: oneLine(msg)})
	}
	return out
}

// oneLine makes a message fit a manifest: one line, no control
// characters, at most manifest.MaxErrorLen bytes.
func oneLine(msg string) string {
	msg = strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, strings.Join(strings.Fields(msg), " "))
	if len(msg) > manifest.MaxErrorLen {
		msg = strings.ToValidUTF8(msg[:manifest.MaxErrorLen-3], "") + "..."
	}
	return msg
}

// configure starts every endpoint with its decoded settings; an endpoint's
// complaint points at the attribute it is about.
func configure(ctx context.Context, p *plan.Pipeline, reg *host.Registry, override sdk.Source) (*endpoint, []*endpoint, error) {
	var diags hcl.Diagnostics
	src := &endpoint{def: p.Source, name: p.Source.Type, source: override}
	if override == nil {
		ep, d, err := configureOne(ctx, p.Source, reg, p.Source.Type)
		if err != nil {
			return nil, nil, err
		}
		diags = append(diags, d...)
		src = ep
	}
	var sinks []*endpoint
	for i, def := range p.Sinks {
		name := def.Type
		if len(p.Sinks) > 1 {
			name = fmt.Sprintf("%s#%d", def.Type, i+1)
		}
		ep, d, err := configureOne(ctx, def, reg, name)
		if err != nil {
			closeAll(src, sinks)
			return nil, nil, err
		}
		diags = append(diags, d...)
		sinks = append(sinks, ep)
	}
	if diags.HasErrors() {
		closeAll(src, sinks)
		return nil, nil, &DiagError{diags}
	}
	return src, sinks, nil
}

// configureOne starts one endpoint with its decoded settings; its
// complaints point at the attributes they are about.
func configureOne(ctx context.Context, e *pipefile.Endpoint, reg *host.Registry, name string) (*endpoint, hcl.Diagnostics, error) {
	var diags hcl.Diagnostics
	vals := map[string]any{}
	for k, v := range e.Values {
		vals[k] = v
	}
	cfg := sdk.NewConfig(vals)
	ep := &endpoint{def: e, name: name}
	var ds sdk.Diagnostics
	if e.Kind == "source" {
		st, err := reg.Source(e.Type)
		if st == nil {
			return nil, nil, fmt.Errorf("source %s: %w", e.Type, errors.Join(err, errors.New("no such type")))
		}
		ep.source, ds = st.Configure(ctx, cfg)
	} else {
		kt, err := reg.Sink(e.Type)
		if kt == nil {
			return nil, nil, fmt.Errorf("sink %s: %w", e.Type, errors.Join(err, errors.New("no such type")))
		}
		ep.sink, ds = kt.Configure(ctx, cfg)
	}
	for _, d := range ds {
		sev := hcl.DiagError
		if d.Severity == sdk.Warning {
			sev = hcl.DiagWarning
		}
		rng := e.Range
		if d.Attribute != "" {
			rng = e.AttrRange(d.Attribute)
		}
		diags = append(diags, &hcl.Diagnostic{Severity: sev, Summary: fmt.Sprintf("%s %q: %s", e.Kind, e.Type, d.Summary), Detail: d.Detail, Subject: rng.Ptr()})
	}
	return ep, diags, nil
}

func closeAll(src *endpoint, sinks []*endpoint) {
	if src != nil {
		if c, ok := src.source.(io.Closer); ok {
			c.Close()
		}
	}
	for _, s := range sinks {
		if c, ok := s.sink.(io.Closer); ok {
			c.Close()
		}
	}
}

// stream is one stream as the run names it.
type stream struct {
	source  string // name in the source
	name    string // name for sinks and the manifest
	ext     string // extension of what the sinks receive
	size    int64  // source size, or -1
	outSize int64  // size the sinks receive if known, or -1
	maxSize int64  // bound of what the sinks receive, or -1
	digest  string // recorded digest to verify (restore), or ""
	runKey  bool   // a copied run's key object (not one of its objects)
}

// maxStored bounds what encoding stages make of n source bytes (each
// stage's kind knows its own bound; a decoding stage's is unknown).
func maxStored(p *plan.Pipeline, n int64) int64 {
	if n < 0 {
		return -1
	}
	for _, s := range p.Stages {
		if n = s.MaxOut(n); n < 0 {
			return -1
		}
	}
	return n
}

type streamsPlan struct {
	streams     []stream
	manifestKey string
	// from is the run read through its manifest, if any; copy is set when
	// the pipeline copies it unchanged into stores (no stage transforms
	// it): the copy is a complete run of its own there, with the same id.
	from  *catalog.Run
	copy  bool
	codec string // decompress codec when "auto"
	frame int
	total int64
}

// planStreams decides what the run reads. A storage source (files, a
// bucket) that names a folder or prefix is read as runs: the newest
// complete run's objects (its manifest says what they are and how to
// verify them), never objects that no manifest names. One object named on
// purpose is read as it is (or, if it is a manifest, as that run). Other
// sources' streams are read as they are.
func planStreams(ctx context.Context, p *plan.Pipeline, src *endpoint, infos []sdk.StreamInfo, sel catalog.Selection, copying bool, warn func(string)) (*streamsPlan, error) {
	for _, in := range infos {
		if err := sdk.CheckStreamName(in.Name); err != nil {
			return nil, fmt.Errorf("source %s yields a stream pipe cannot name: %w; rename it (or, for a command, set its name)", src.name, err)
		}
	}
	sp := &streamsPlan{}
	single := false
	if sel, ok := src.source.(sdk.Selection); ok {
		single = sel.Single()
	}
	storage := src.def != nil && src.def.Schema.Storage
	switch {
	case storage && single && len(infos) == 1 && manifest.IsKey(infos[0].Name):
		m, err := catalog.ReadManifest(ctx, src.source, infos[0].Name)
		if err != nil {
			return nil, fmt.Errorf("source %s: manifest %s: %w", src.name, infos[0].Name, err)
		}
		r := &catalog.Run{Key: infos[0].Name, Manifest: m}
		if sel.RunID != "" && sel.RunID != m.RunID {
			return nil, fmt.Errorf("source %s names the manifest of run %s, not of run %s", src.name, m.RunID, sel.RunID)
		}
		if sel.Pipeline != "" && sel.Pipeline != m.Pipeline {
			return nil, fmt.Errorf("source %s names a run of pipeline %q, not of %q", src.name, m.Pipeline, sel.Pipeline)
		}
		if t := sel.Target; t != nil {
			if ok, why := t.Reaches(r); !ok {
				return nil, fmt.Errorf("source %s names run %s, which cannot be recovered to %s: %s, after the target, and a recovery replays forward from the end of the backup it restores (the server would refuse to start); point the source at the folder or prefix of all runs to restore the newest that can (pipe backups lists them), or choose a later target", src.name, m.RunID, t, why)
			}
		}
		if err := fromManifest(ctx, p, src, r, sp, copying, warn); err != nil {
			return nil, err
		}
	case storage && !single:
		cat, err := catalog.Read(ctx, sourceStore{src.source, infos})
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", src.name, err)
		}
		for _, bad := range cat.Invalid {
			if sel.RunID == "" {
				return nil, fmt.Errorf("source %s: manifest %s: %w; remove it, or choose a run (run = \"…\", or point the source at one run's folder or manifest)", src.name, bad.Key, bad.Err)
			}
			warn(fmt.Sprintf("source %s: manifest %s is not valid, its run is left out: %v", src.name, bad.Key, bad.Err))
		}
		if len(cat.Runs) == 0 {
			if p.Restores() || len(infos) == 0 {
				return nil, noRun(src, cat)
			}
			// A backup of a folder of files.
			if err := fromListing(p, infos, sp); err != nil {
				return nil, err
			}
			break
		}
		r, err := cat.Select(sel)
		if err != nil {
			return nil, fmt.Errorf("source %s (%s): %w", src.name, where(src), err)
		}
		if sel.RunID == "" && sel.Before.IsZero() && sel.Target == nil {
			for _, g := range cat.Newer(r.Manifest.StartedAt) {
				warn(fmt.Sprintf("run %s under the source looks incomplete (%s, %s, no manifest: it did not finish, or is still running); restoring the newest complete run, %s", g.RunID, plan.Plural(len(g.Objects), "object"), pipefile.HumanSize(g.Size), r.Manifest.RunID))
			}
		}
		if err := fromManifest(ctx, p, src, r, sp, copying, warn); err != nil {
			return nil, err
		}
	default:
		if err := fromListing(p, infos, sp); err != nil {
			return nil, err
		}
		if p.Restores() && len(infos) > 0 {
			what := fmt.Sprintf("%d streams of source %s", len(infos), src.name)
			if len(infos) == 1 {
				what = fmt.Sprintf("%s of source %s", infos[0].Name, src.name)
			}
			warn(fmt.Sprintf("reading %s as it is: no manifest names it, so nothing verifies it", what))
		}
	}
	if len(sp.streams) == 0 {
		return nil, fmt.Errorf("source %s yields no streams: nothing to back up; check its %s", src.name, where(src))
	}
	sp.total = 0
	for _, s := range sp.streams {
		if s.size < 0 {
			sp.total = -1
			break
		}
		sp.total += s.size
	}
	return sp, nil
}

// selection is the run the pipeline's source asks for, with what the
// command line says beating it.
func selection(p *plan.Pipeline, over catalog.Selection) catalog.Selection {
	var sel catalog.Selection
	if p.Source != nil {
		sel = p.Source.Selection
	}
	if over.RunID != "" {
		sel.RunID, sel.Before = over.RunID, time.Time{}
	}
	if !over.Before.IsZero() {
		sel.Before, sel.RunID = over.Before, ""
	}
	if over.Pipeline != "" {
		sel.Pipeline = over.Pipeline
	}
	return sel
}

// sourceStore lets the catalog read a storage source: its streams are the
// objects under its folder or prefix.
type sourceStore struct {
	src   sdk.Source
	infos []sdk.StreamInfo
}

func (s sourceStore) List(context.Context) ([]sdk.ObjectInfo, error) {
	out := make([]sdk.ObjectInfo, 0, len(s.infos))
	for _, in := range s.infos {
		out = append(out, sdk.ObjectInfo{Key: in.Name, Size: in.Size})
	}
	return out, nil
}

func (s sourceStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.src.Open(ctx, key)
}

// where names the attribute that says what a source reads, as written.
func where(src *endpoint) string {
	if src.def == nil {
		return "settings"
	}
	for _, a := range []string{"path", "prefix", "key", "command", "database"} {
		if v := src.def.Source(a); v != "" {
			return a + " = " + v
		}
	}
	return "settings"
}

// noRun explains a restore from a folder or prefix that holds no complete
// run, and how to read an object anyway.
func noRun(src *endpoint, cat *catalog.Catalog) error {
	if len(cat.Objects) == 0 {
		return fmt.Errorf("source %s holds nothing to restore: no manifest and no object under %s; check the path or prefix (a backup writes each run under its own folder, e.g. backups/<pipeline>/<run id>/)", src.name, where(src))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "source %s (%s) holds no complete run: %s, and no manifest names them", src.name, where(src), plan.Plural(len(cat.Objects), "object"))
	for _, g := range cat.Incomplete {
		if g.RunID == "" {
			continue
		}
		fmt.Fprintf(&b, "; run %s (started %s, %s, %s) has no manifest: it did not finish, or is still running", g.RunID, catalog.TimeText(g.Started), plan.Plural(len(g.Objects), "object"), pipefile.HumanSize(g.Size))
	}
	first := cat.Objects[0].Key
	return fmt.Errorf("%s. pipe restores only runs whose manifest it finds (%w). To read one object on purpose, name it in the source (path = \"…/%s\" for fs; key = \"%s\" for s3, gcs and azure): nothing will verify it", b.String(), catalog.ErrNoRun, first, first)
}

func fromManifest(ctx context.Context, p *plan.Pipeline, src *endpoint, r *catalog.Run, sp *streamsPlan, copying bool, warn func(string)) error {
	m := r.Manifest
	sp.manifestKey, sp.from = r.Key, r
	sp.frame = int(m.FrameSize)
	if m.RunKey != nil && !copying {
		if err := openRunKey(ctx, p, sourceStore{src: src.source}, r); err != nil {
			return err
		}
	}
	dec, decomp := p.Stage(stagekind.Decrypt.Name), p.Stage(stagekind.Decompress.Name)
	codecs := map[string]bool{}
	for _, o := range m.Objects {
		codecs[o.Codec] = true
		key := r.ObjectKey(o)
		if key == ".." || strings.HasPrefix(key, "../") {
			return fmt.Errorf("manifest %s: object %q lies outside the source", sp.manifestKey, o.Key)
		}
		switch {
		case copying:
			// The objects go as they are: encrypted ones stay so.
		case o.Encryption != "" && dec == nil && m.RunKey != nil:
			return fmt.Errorf("the backup in %s is encrypted with a passphrase: add decrypt { passphrase = env(\"PIPE_PASSPHRASE\") } to pipeline %q", sp.manifestKey, p.Name)
		case o.Encryption != "" && dec == nil:
			return fmt.Errorf("the backup in %s is encrypted (recipients %s): add decrypt { identities = [file(\"keys/backup.key\")] } to pipeline %q", sp.manifestKey, strings.Join(o.Recipients, ", "), p.Name)
		case o.Encryption == "" && dec != nil:
			return fmt.Errorf("the backup in %s is not encrypted: remove the decrypt stage from pipeline %q", sp.manifestKey, p.Name)
		case dec != nil && dec.Keys.Passphrase() && !anyShared(dec.Keys.Fingerprints, o.Recipients):
			return fmt.Errorf("%s was encrypted to keys (%s), not to a passphrase: give decrypt { identities = [file(\"keys/backup.key\")] } with one of their identity files", o.Key, strings.Join(o.Recipients, ", "))
		case dec != nil && !anyShared(dec.Keys.Fingerprints, o.Recipients):
			return fmt.Errorf("wrong key: %s was encrypted to %s, and decrypt holds %s; use the identity file of one of those recipients", o.Key, strings.Join(o.Recipients, ", "), strings.Join(dec.Keys.Fingerprints, ", "))
		}
		ext := ""
		if c, ok := compress.Lookup(o.Codec); ok && decomp == nil {
			ext = c.Ext
		}
		if o.Encryption != "" && dec == nil {
			ext += encrypt.Ext
		}
		s := stream{source: key, name: o.Stream, ext: ext + p.Ext(), size: o.Size, outSize: -1, maxSize: -1, digest: o.Digest}
		if (o.Codec == "none" || decomp != nil) && (o.Encryption == "" || dec != nil) && p.Ext() == "" {
			s.outSize, s.maxSize = o.OriginalSize, o.OriginalSize
		}
		sp.streams = append(sp.streams, s)
	}
	if len(codecs) > 1 {
		return fmt.Errorf("manifest %s mixes codecs (%s); restore them in separate runs", sp.manifestKey, strings.Join(slices.Sorted(maps.Keys(codecs)), ", "))
	}
	for c := range codecs {
		if decomp != nil && decomp.Codec != "auto" && decomp.Codec != c {
			return fmt.Errorf("decompress { codec = %q } but the backup in %s is %s: drop codec to take it from the manifest", decomp.Codec, sp.manifestKey, c)
		}
		sp.codec = c
	}
	return nil
}

func anyShared(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// fromListing reads the source's streams as they are. Decoding stages take
// their extension off a stream's name; encoding stages add theirs.
func fromListing(p *plan.Pipeline, infos []sdk.StreamInfo, sp *streamsPlan) error {
	decomp := p.Stage(stagekind.Decompress.Name)
	codecs := map[string][]string{}
	sizeKept := true
	for _, s := range p.Stages {
		if !s.KeepsSize() {
			sizeKept = false
		}
	}
	for _, in := range infos {
		name, ext := in.Name, ""
		for _, s := range p.Stages {
			switch {
			case s.Decodes():
				var codec string
				var err error
				if name, codec, err = s.Strip(name, in.Name); err != nil {
					return err
				}
				if codec != "" {
					codecs[codec] = append(codecs[codec], in.Name)
				}
			default:
				ext += s.Ext()
			}
		}
		st := stream{source: in.Name, name: name, ext: ext, size: in.Size, outSize: -1, maxSize: maxStored(p, in.Size)}
		if sizeKept {
			st.outSize = in.Size
		}
		sp.streams = append(sp.streams, st)
	}
	if len(codecs) > 1 {
		var parts []string
		for _, c := range slices.Sorted(maps.Keys(codecs)) {
			parts = append(parts, fmt.Sprintf("%s (%s)", c, codecs[c][0]))
		}
		return fmt.Errorf("the streams use different codecs: %s; restore them in separate runs or set decompress { codec = … }", strings.Join(parts, ", "))
	}
	for c := range codecs {
		sp.codec = c
	}
	if decomp != nil && decomp.Codec != "auto" {
		sp.codec = decomp.Codec
	}
	return nil
}

// nameObjects renders each stream's object key for each sink and the
// manifest key of each storage sink, and fills the job's streams.
//
// A restore writes no manifest: neither a pipeline that decodes nor one
// that reads a backup through its manifest (a restore without stages, of a
// backup that had only a checksum, would otherwise leave a manifest among
// the restored files, and a copy of a compressed backup would get one that
// calls its objects plain).
func nameObjects(p *plan.Pipeline, sinks []*endpoint, sp *streamsPlan, job *engine.Job) (map[int]string, error) {
	manifests := map[int]string{}
	restoring := p.Restores() || (sp.from != nil && !sp.copy)
	for i, s := range sinks {
		key := s.def.Key
		if sp.copy && key != nil {
			key = key.For(sp.from.Manifest.RunID) // the copy keeps its run's id
		}
		if !restoring && s.def.Stores() && (s.def.KeepLast > 0 || s.def.KeepWithin > 0) {
			if _, ok := s.sink.(sdk.Storage); !ok {
				return nil, fmt.Errorf("sink %s: keep_last/keep_within need a sink that can list and remove its objects; %s cannot", s.name, s.def.Type)
			}
		}
		if !restoring && s.def.Stores() {
			k, err := key.ManifestKey()
			if err != nil {
				return nil, fmt.Errorf("sink %s: %w", s.name, err)
			}
			manifests[i] = k
		}
		if s.def.Key != nil && s.def.Key.Kind == pipefile.KeyObject && len(sp.streams) != 1 {
			return nil, fmt.Errorf("sink %s: %s = %s names one object, but the source yields %d streams: end it with \"/\" to make it a folder, or use ${stream.name} in it", s.name, s.def.Key.Attr, s.def.Key.Text, len(sp.streams))
		}
	}
	keys := make([]map[string]string, len(sinks))
	for i := range keys {
		keys[i] = map[string]string{}
		if m, ok := manifests[i]; ok {
			keys[i][m] = "the manifest"
		}
	}
	for _, st := range sp.streams {
		es := engine.Stream{Name: st.source, Size: st.size}
		for i, s := range sinks {
			key := st.name + st.ext
			if s.def.Key != nil {
				tmpl := s.def.Key
				if sp.copy {
					tmpl = tmpl.For(sp.from.Manifest.RunID)
				}
				var err error
				if key, err = tmpl.Render(st.name, st.ext); err != nil {
					return nil, fmt.Errorf("sink %s: %w", s.name, err)
				}
			}
			if prev, dup := keys[i][key]; dup {
				return nil, fmt.Errorf("sink %s: stream %q and %s would both be written to %s: make the sink's path a folder (ending in /) or use ${stream.name} in it", s.name, st.name, prev, key)
			}
			keys[i][key] = fmt.Sprintf("%q", st.name)
			max := st.maxSize
			if st.outSize >= 0 {
				max = st.outSize
			}
			es.Objects = append(es.Objects, sdk.Object{Key: key, Stream: st.name, Size: st.outSize, MaxSize: max})
		}
		if st.digest != "" {
			v, err := checksum.Verify(st.digest, fmt.Sprintf("object %q", st.source))
			if err != nil {
				return nil, err
			}
			es.Checks = append(es.Checks, v)
		}
		job.Streams = append(job.Streams, es)
	}
	return manifests, nil
}

// outcome is what a manifest says of its run's streams besides the
// objects: those that failed, and whether they stand alone.
type outcome struct {
	failed      []manifest.Failed
	independent bool
	damage      string
}

// writeManifests writes the run's manifest to each storage sink, last.
func writeManifests(ctx context.Context, p *plan.Pipeline, runID string, started time.Time, facts map[string]string, sinks []*endpoint, keys map[int]string, sp *streamsPlan, res *engine.Result, runKey *wrappedKey, out outcome, wrote *[]wroteManifest) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if sp.copy {
		return writeCopies(ctx, sinks, keys, sp, res, wrote)
	}
	codec, frame, recipients, encryption := "none", int64(0), []string(nil), ""
	if c := p.Stage(stagekind.Compress.Name); c != nil && !c.Idle() {
		codec, frame = c.Codec, int64(c.ChunkSize)
	}
	if e := p.Stage(stagekind.Encrypt.Name); e != nil {
		encryption, recipients = "age", e.Keys.Fingerprints
	}
	decodes := p.Stage(stagekind.Decompress.Name) != nil || p.Stage(stagekind.Decrypt.Name) != nil
	var written []string
	for i, s := range sinks {
		mkey, ok := keys[i]
		if !ok {
			continue
		}
		m := &manifest.Manifest{RunID: runID, Pipeline: p.Name, StartedAt: started, FinishedAt: time.Now().UTC(),
			FrameSize: frame, Source: facts, PipeVersion: version.Version, Failed: out.failed, Independent: out.independent, Damage: out.damage}
		if runKey != nil {
			m.RunKey = &manifest.RunKey{Key: manifest.Rel(mkey, runKey.keys[i]), Size: int64(len(runKey.wrapped)), Digest: runKey.digest}
		}
		for k, r := range res.Streams {
			if !r.Committed {
				continue // failed, in an isolated run
			}
			o := manifest.Object{Stream: sp.streams[k].name, Key: manifest.Rel(mkey, r.Objects[i].Key), Size: r.Written,
				OriginalSize: r.Read, Digest: r.Observed[stagekind.Checksum.Name], Codec: codec, Encryption: encryption, Recipients: recipients}
			if decodes {
				o.OriginalSize = -1
			}
			m.Objects = append(m.Objects, o)
		}
		b, err := m.Marshal()
		if err == nil {
			err = put(ctx, s.sink, mkey, b)
		}
		if err != nil {
			removeAll(ctx, sinks, keys, written)
			return nil, fmt.Errorf("sink %s: writing the manifest %s: %w", s.name, mkey, err)
		}
		written = append(written, mkey)
		*wrote = append(*wrote, wroteManifest{sink: i, key: mkey, m: m, size: int64(len(b))})
	}
	return written, nil
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

// writeCopies writes a copied run's manifest to each storage sink: the
// run as it was (its id, pipeline, times, facts and objects' codecs and
// recipients), its objects where the copy put them, and when it was
// copied. The copy's digests are the bytes it wrote, which the source's
// recorded digests checked on the way.
func writeCopies(ctx context.Context, sinks []*endpoint, keys map[int]string, sp *streamsPlan, res *engine.Result, wrote *[]wroteManifest) ([]string, error) {
	orig := sp.from.Manifest
	byStream := map[string]manifest.Object{}
	for _, o := range orig.Objects {
		byStream[o.Stream] = o
	}
	var written []string
	for i, s := range sinks {
		mkey, ok := keys[i]
		if !ok {
			continue
		}
		m := *orig
		m.Objects, m.RunKey = nil, nil
		m.CopiedAt = time.Now().UTC()
		for k, r := range res.Streams {
			st := sp.streams[k]
			if st.runKey {
				m.RunKey = &manifest.RunKey{Key: manifest.Rel(mkey, r.Objects[i].Key), Size: r.Written, Digest: r.Observed[stagekind.Checksum.Name]}
				continue
			}
			o := byStream[st.name]
			o.Key, o.Size, o.Digest = manifest.Rel(mkey, r.Objects[i].Key), r.Written, r.Observed[stagekind.Checksum.Name]
			m.Objects = append(m.Objects, o)
		}
		b, err := m.Marshal()
		if err == nil {
			err = put(ctx, s.sink, mkey, b)
		}
		if err != nil {
			removeAll(ctx, sinks, keys, written)
			return nil, fmt.Errorf("sink %s: writing the copy's manifest %s: %w", s.name, mkey, err)
		}
		written = append(written, mkey)
		*wrote = append(*wrote, wroteManifest{sink: i, key: mkey, m: &m, size: int64(len(b))})
	}
	return written, nil
}

// wroteManifest is a manifest a run wrote, for the stores' indexes.
type wroteManifest struct {
	sink int
	key  string
	m    *manifest.Manifest
	size int64
}

// updateIndexes adds the run to the index of each store of runs it wrote
// to (see catalog.Index). A failure costs the next listing speed, not the
// backup: it is a warning.
func updateIndexes(ctx context.Context, sinks []*endpoint, wrote []wroteManifest, warn func(string)) {
	for _, w := range wrote {
		s := sinks[w.sink]
		i := strings.Index(w.key, w.m.RunID)
		if i < 0 {
			continue // not a store of runs: one run in its place
		}
		root := w.key[:i]
		st := sinkStore{st: s.sink.(sdk.Storage), sink: s.sink, root: root}
		e := catalog.NewEntry(strings.TrimPrefix(w.key, root), w.size, w.m)
		if err := catalog.UpdateIndex(ctx, st, []catalog.Entry{e}, nil); err != nil {
			warn(fmt.Sprintf("sink %s: %v; listings read the manifests instead (the backup is complete)", s.name, err))
		}
	}
}

// sourceFacts is what a manifest records about the source: its type and
// the facts it described.
func sourceFacts(src *endpoint, described map[string]string) map[string]string {
	facts := map[string]string{}
	for k, v := range described {
		facts[k] = v
	}
	facts["type"] = src.def.Type
	return facts
}

// skipDeclined drops from the job the streams every sink declined (see
// sdk.Chooser): they are not read at all. It returns their names.
func skipDeclined(sinks []*endpoint, job *engine.Job, sp *streamsPlan) []string {
	declined := make([]int, len(job.Streams)) // sinks that decline each stream
	for i, s := range sinks {
		c, ok := s.sink.(sdk.Chooser)
		if !ok {
			return nil // a sink that does not choose wants everything
		}
		objs := make([]sdk.Object, 0, len(job.Streams))
		for _, st := range job.Streams {
			objs = append(objs, st.Objects[i])
		}
		d := c.Declines(objs)
		if len(d) != len(objs) {
			return nil
		}
		for j, no := range d {
			if no {
				declined[j]++
			}
		}
	}
	return dropStreams(job, sp, func(j int) bool { return declined[j] == len(sinks) && len(sinks) > 0 })
}

// skipIncomplete drops from a restore's job the streams of each group
// (the streams named <group>/…, see sdk.Independent) of which a stream
// failed in the backup: a database read table by table restores all of
// its tables or none. It returns their names.
func skipIncomplete(job *engine.Job, sp *streamsPlan, failed []manifest.Failed) []string {
	groups := map[string]bool{}
	for _, f := range failed {
		if g, ok := sdk.StreamGroup(f.Stream); ok {
			groups[g] = true
		}
	}
	if len(groups) == 0 {
		return nil
	}
	return dropStreams(job, sp, func(j int) bool {
		g, ok := sdk.StreamGroup(sp.streams[j].name)
		return ok && groups[g]
	})
}

// dropStreams drops from the job the streams drop picks (by index) and
// returns their names.
func dropStreams(job *engine.Job, sp *streamsPlan, drop func(j int) bool) []string {
	var dropped []string
	keep := job.Streams[:0]
	keepPlan := sp.streams[:0]
	for j, st := range job.Streams {
		if drop(j) {
			dropped = append(dropped, sp.streams[j].name)
			if sp.total >= 0 && sp.streams[j].size >= 0 {
				sp.total -= sp.streams[j].size
			}
			continue
		}
		keep = append(keep, st)
		keepPlan = append(keepPlan, sp.streams[j])
	}
	job.Streams, sp.streams = keep, keepPlan
	return dropped
}

// joinFacts is a source's facts with more of them; more wins.
func joinFacts(facts, more map[string]string) map[string]string {
	out := make(map[string]string, len(facts)+len(more))
	for k, v := range facts {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

// prepare tells the sinks that want it every object of the run, in order,
// and, for a partial run, the streams that failed in the backup. It
// returns those of them a sink asked for (see sdk.PartialPreparer): every
// one that a sink which cannot tell would have restored.
func prepare(ctx context.Context, sinks []*endpoint, job *engine.Job, failed []string) (missing []string, err error) {
	wanted := make([]bool, len(failed))
	for i, s := range sinks {
		objs := make([]sdk.Object, 0, len(job.Streams))
		for _, st := range job.Streams {
			objs = append(objs, st.Objects[i])
		}
		var w []bool
		if pp, ok := s.sink.(sdk.PartialPreparer); ok && len(failed) > 0 {
			if w, err = pp.PreparePartial(ctx, objs, failed); err != nil {
				return nil, fmt.Errorf("sink %s: %w", s.name, err)
			}
		} else if p, ok := s.sink.(sdk.Preparer); ok {
			if err := p.Prepare(ctx, objs); err != nil {
				return nil, fmt.Errorf("sink %s: %w", s.name, err)
			}
		}
		for j := range wanted {
			wanted[j] = wanted[j] || len(w) != len(failed) || w[j]
		}
	}
	for j, f := range failed {
		if wanted[j] {
			missing = append(missing, f)
		}
	}
	return missing, nil
}

func put(ctx context.Context, s sdk.Sink, key string, b []byte) error {
	return putObject(ctx, s, sdk.Object{Key: key, Stream: path.Base(key), Size: int64(len(b))}, b)
}

// replace writes b at key over what is there (a store's index).
func replace(ctx context.Context, s sdk.Sink, key string, b []byte) error {
	return putObject(ctx, s, sdk.Object{Key: key, Stream: path.Base(key), Size: int64(len(b)), Replace: true}, b)
}

func putObject(ctx context.Context, s sdk.Sink, obj sdk.Object, b []byte) error {
	w, err := s.Create(ctx, obj)
	if err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		w.Abort(ctx)
		return err
	}
	if err := w.Commit(ctx); err != nil {
		w.Abort(context.WithoutCancel(ctx))
		return err
	}
	if f, ok := s.(sdk.Flusher); ok {
		return f.Flush(ctx)
	}
	return nil
}

// removeAll takes back manifests already written when a later one failed.
func removeAll(ctx context.Context, sinks []*endpoint, keys map[int]string, written []string) {
	done := map[string]bool{}
	for _, k := range written {
		done[k] = true
	}
	for i, s := range sinks {
		if k, ok := keys[i]; ok && done[k] {
			if rm, ok := s.sink.(sdk.Remover); ok {
				_ = rm.Remove(context.WithoutCancel(ctx), k)
			}
		}
	}
}
