package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
	"github.com/pipebackup/pipe/synthetic"
)

// benchOptions are pipe bench's flags.
type benchOptions struct {
	load         loadFlags
	pipeline     string
	profiles     string
	sweeps       []string
	synthetic    string
	synthStreams int
	duration     time.Duration
	write        bool
}

func (a *app) benchCmd() *cobra.Command {
	var o benchOptions
	cmd := &cobra.Command{
		Use:   "bench FILE.hcl",
		Short: "Try a pipeline with each profile, or a sweep of a setting, and recommend one",
		Long: `bench runs one pipeline of the file once per variant, on this host and this
network: with each profile (--profiles, default all of them), or with each
value of a setting (--sweep workers=1,2,4). A variant's settings resolve as
pipe run resolves them, except that a swept setting beats the file. It
prints each variant's throughput, its stages' utilization, the bottleneck
and the memory, and recommends the fastest variant or, among those within 5%
of it, the one with the smallest memory budget. --write puts a recommended
profile into the file.

Each variant is a trial run: it reads and writes as a real run does, then
removes every object it wrote, writes no manifest and applies no retention.
It refuses restores and sinks that cannot take back what they receive (a
database, a command), and never writes to a key that already holds an object.
Each variant stops when its input ends or after --duration, and is then
measured over the bytes it moved. One whose input ends early runs again while
another run fits in --duration (up to 3 runs), and is measured over them all.

--synthetic SIZE reads generated data that compresses like a database dump
(about 4x with zstd -3) instead of the file's source: SIZE bytes in each of
--synthetic-streams streams.`,
		Example: `  pipe bench backup.hcl --pipeline backup
  pipe bench backup.hcl --synthetic 1GiB --duration 30s --write
  pipe bench backup.hcl --profiles balanced --sweep workers=1,2,4 --sweep chunk_size=4MiB,16MiB`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.bench(cmd.Context(), args[0], &o)
		},
	}
	o.load.register(cmd, false, false, true)
	cmd.Flags().StringVar(&o.pipeline, "pipeline", "", "the pipeline to bench (needed when the file has more than one)")
	cmd.Flags().StringVar(&o.profiles, "profiles", "", "comma-separated profiles to try: "+strings.Join(profiles.Names(), ", ")+" (default: all of them; with --sweep, the file's)")
	cmd.Flags().StringArrayVar(&o.sweeps, "sweep", nil, "try each value of a setting: --sweep KNOB=V1,V2,… with KNOB one of "+strings.Join(plan.Knobs, ", ")+" (repeatable: every combination)")
	cmd.Flags().StringVar(&o.synthetic, "synthetic", "", "read generated dump-like data instead of the file's source: this many bytes per stream (e.g. 1GiB)")
	cmd.Flags().IntVar(&o.synthStreams, "synthetic-streams", 1, "streams of --synthetic data")
	cmd.Flags().DurationVar(&o.duration, "duration", 20*time.Second, "longest time per variant; one cut short is measured over what it moved")
	cmd.Flags().BoolVar(&o.write, "write", false, "write the recommended profile into the file's pipeline block")
	return cmd
}

// variant is one configuration the bench tries.
type variant struct {
	Name      string           `json:"name"`
	Profile   string           `json:"profile"`
	Overrides map[string]int64 `json:"overrides,omitempty"`
}

// benchRow is what one variant measured.
type benchRow struct {
	variant
	Seconds float64 `json:"seconds"`
	// Runs is how many runs the variant made; the row adds them up.
	Runs int `json:"runs"`
	// Cut is true when --duration stopped the variant before its input
	// ended.
	Cut          bool    `json:"cut"`
	ReadBytes    int64   `json:"read_bytes"`
	StoredBytes  int64   `json:"stored_bytes"`
	ReadPerSec   float64 `json:"read_bytes_per_sec"`
	StoredPerSec float64 `json:"stored_bytes_per_sec"`
	Bottleneck   string  `json:"bottleneck"`
	// Budget is the plan's memory budget; PeakRSS the peak resident memory
	// of pipe and its plugin processes during the variant (-1: unknown).
	Budget      int64        `json:"memory_budget_bytes"`
	PeakRSS     int64        `json:"peak_rss_bytes"`
	PeakBuffers int          `json:"peak_buffers"`
	Buffers     int          `json:"buffers"`
	Stages      []benchStage `json:"stages"`
}

// benchStage is one position of a variant's run.
type benchStage struct {
	Name    string `json:"name"`
	Label   string `json:"label,omitempty"`
	Workers int    `json:"workers"`
	// Bytes is what the position read (the source: what it yielded).
	Bytes       int64   `json:"bytes"`
	PerSec      float64 `json:"bytes_per_sec"`
	Utilization float64 `json:"utilization"`
}

// benchReport is the bench's outcome, as --json prints it.
type benchReport struct {
	File     string     `json:"file"`
	Pipeline string     `json:"pipeline"`
	Host     benchHost  `json:"host"`
	Source   string     `json:"source"`
	Limit    float64    `json:"duration_limit_seconds"`
	Variants []benchRow `json:"variants"`
	// Recommended names the recommended variant; Reason says why.
	Recommended string `json:"recommended"`
	Reason      string `json:"reason"`
	// Settings are the lines that keep the recommendation in the file.
	Settings []string `json:"settings,omitempty"`
	// Written says what --write changed, or why it did not.
	Written string `json:"written,omitempty"`
}

type benchHost struct {
	CPUs   int   `json:"cpus"`
	Memory int64 `json:"memory_bytes"`
}

// errCut is the cause of a variant's context when --duration ends it.
var errCut = errors.New("cut by the bench's --duration")

func (a *app) bench(parent context.Context, path string, o *benchOptions) error {
	fail := func(format string, args ...any) error {
		fmt.Fprintf(a.stderr, "Error: "+format+"\n", args...)
		return &exitError{exitInvalid}
	}
	vars, err := parseVars(o.load.vars)
	if err != nil {
		return fail("%v", err)
	}
	if o.duration <= 0 {
		return fail("--duration %s: give a positive duration, e.g. 20s", o.duration)
	}
	var synthSize int64
	if o.synthetic != "" {
		if synthSize, _, err = pipefile.ParseSize(o.synthetic); err != nil || synthSize <= 0 {
			return fail("--synthetic %s: give the bytes of each stream, e.g. 1GiB", o.synthetic)
		}
		if o.synthStreams < 1 || o.synthStreams > 1024 {
			return fail("--synthetic-streams %d: give between 1 and 1024 streams", o.synthStreams)
		}
	}
	sweeps, err := parseSweeps(o.sweeps)
	if err != nil {
		return fail("%v", err)
	}
	if _, err := a.openRegistry(); err != nil {
		return err
	}

	// The first load checks the file and picks the pipeline; each variant
	// loads and plans it again (a plan fills in its endpoints' values).
	first, err := a.benchPlan(path, vars, "", variant{}, o, true)
	if err != nil {
		return err
	}
	if err := benchable(first); err != nil {
		return fail("pipe bench %s: %v", path, err)
	}
	if err := checkKnobs(first, sweeps); err != nil {
		return fail("%v", err)
	}
	variants, err := benchVariants(first, o.profiles, sweeps, a.host)
	if err != nil {
		return fail("%v", err)
	}
	for _, v := range variants {
		if _, err := a.benchPlan(path, vars, "", v, o, false); err != nil {
			return err
		}
	}

	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := benchReport{File: path, Pipeline: first.Name, Host: benchHost{a.host.CPUs, a.host.Memory}, Limit: o.duration.Seconds(), Source: first.Source.Type}
	if synthSize > 0 {
		rep.Source = fmt.Sprintf("synthetic: %s × %s", plan.Plural(o.synthStreams, "stream"), pipefile.HumanSize(synthSize))
	}
	fmt.Fprintf(a.stderr, "bench: pipeline %q of %s, %s, on %d CPUs; %s, up to %s each\n",
		first.Name, path, rep.Source, a.host.CPUs, plan.Plural(len(variants), "variant"), o.duration)
	warned := map[string]bool{}
	warn := func(msg string) {
		if !warned[msg] {
			warned[msg] = true
			a.log.Warn(msg) // redacted, in the chosen log format, as pipe run's
		}
	}
	for i, v := range variants {
		row, err := a.benchVariant(ctx, path, vars, v, o, synthSize, warn)
		if err != nil {
			return err
		}
		rep.Variants = append(rep.Variants, row)
		how := pipefile.HumanSize(row.ReadBytes) + " read"
		switch {
		case row.Cut:
			how += ", cut by --duration"
		case row.Runs > 1:
			how += fmt.Sprintf(" in %d runs", row.Runs)
		}
		fmt.Fprintf(a.stderr, "bench: [%d/%d] %s: %s/s in %s (%s), bottleneck %s\n", i+1, len(variants), v.Name,
			pipefile.HumanSize(int64(row.ReadPerSec)), seconds(row.Seconds), how, row.Bottleneck)
	}

	best, reason := recommend(rep.Variants)
	rep.Recommended, rep.Reason = rep.Variants[best].Name, reason
	rec := rep.Variants[best]
	rep.Settings = settingLines(first, rec.variant)
	if o.write {
		rep.Written = a.writeRecommendation(first, rec.variant, synthSize > 0)
	}
	if o.load.json {
		return writeJSON(a.stdout, rep)
	}
	printBench(a.stdout, &rep)
	return nil
}

// maxRuns bounds the runs of a variant whose input is short.
const maxRuns = 3

// benchVariant measures one variant: a trial run until its input ends or
// --duration passes. While another run fits in what is left of --duration
// (up to maxRuns), the variant runs again, and is measured over all its
// runs: short inputs are noisy (cold caches, other processes). A repeat
// that --duration cuts after all is dropped.
func (a *app) benchVariant(ctx context.Context, path string, vars map[string]string, v variant, o *benchOptions, synthSize int64, warn func(string)) (benchRow, error) {
	deadline := time.Now().Add(o.duration)
	var (
		runs []benchRun
		p    *benchPlanned
		cut  bool
	)
	peak := int64(-1)
	for len(runs) < maxRuns {
		runID := newRunID(time.Now())
		var err error
		if p, err = a.benchPlan(path, vars, runID, v, o, false); err != nil {
			return benchRow{}, err
		}
		secrets := p.planFile.Secrets()
		ro := runner.Options{RunID: runID, Registry: a.registry, Trial: true, Warn: func(msg string) { warn(scrub(msg, secrets)) }}
		if synthSize > 0 {
			ro.Source = synthetic.New(o.synthStreams, synthSize)
		}
		setMemoryLimit(p.Pipeline)
		resetPeakRSS()
		vctx, cancel := context.WithDeadlineCause(ctx, deadline, errCut)
		start := time.Now()
		r, err := runner.Run(vctx, p.Pipeline, ro)
		took := time.Since(start)
		cut = err != nil && ctx.Err() == nil && context.Cause(vctx) == errCut
		cancel()
		switch {
		case ctx.Err() != nil:
			fmt.Fprintf(a.stderr, "%v: the bench stopped; what the variant wrote was taken back\n", context.Cause(ctx))
			return benchRow{}, &exitError{exitInterrupted}
		case cut && len(runs) > 0:
			// A repeat that did not fit after all.
			return measure(v, p.Budget(), runs, false).withPeak(peak), nil
		case cut && (r == nil || r.Result == nil):
			fmt.Fprintf(a.stderr, "Error: variant %s: --duration %s ended before the run moved any data (configuring the endpoints took that long): give a longer --duration\n", v.Name, o.duration)
			return benchRow{}, &exitError{exitInvalid}
		case err != nil && !cut:
			var de *runner.DiagError
			if errors.As(err, &de) {
				a.printDiags(p.planFile, de.Diags)
			} else {
				fmt.Fprintf(a.stderr, "Error: variant %s: %s\n", v.Name, scrub(err.Error(), secrets))
			}
			return benchRow{}, &exitError{exitFailed}
		}
		runs = append(runs, benchRun{res: r.Result, wall: runWall(r.Result, cut, deadline)})
		peak = max(peak, peakRSS())
		if cut || time.Now().Add(took).After(deadline) {
			break
		}
	}
	return measure(v, p.Budget(), runs, cut).withPeak(peak), nil
}

func (r benchRow) withPeak(peak int64) benchRow {
	r.PeakRSS = peak
	return r
}

// benchPlanned is a pipeline planned for one variant, with its file.
type benchPlanned struct {
	*plan.Pipeline
	planFile *pipefile.File
}

// benchPlan loads and plans the file's bench pipeline for variant v (the
// zero variant: as the file says). Diagnostics are printed when there are
// errors, warnings only when show is set.
func (a *app) benchPlan(path string, vars map[string]string, runID string, v variant, o *benchOptions, show bool) (*benchPlanned, error) {
	file, diags := pipefile.Load(path, pipefile.Options{Vars: vars, RunID: runID, Now: time.Now(), Schemas: a.registry})
	if !diags.HasErrors() {
		def, err := pickPipeline(file, o.pipeline)
		if err != nil {
			fmt.Fprintf(a.stderr, "Error: %s: %v\n", path, err)
			return nil, &exitError{exitInvalid}
		}
		file.Pipelines = []*pipefile.Pipeline{def}
		memory := a.registry.Memory
		if o.synthetic != "" {
			def.Source = &pipefile.Endpoint{Block: pipefile.Block{Type: synthetic.Type, Range: def.Source.Range, Values: map[string]any{}},
				Kind: "source", TypeRange: def.Source.TypeRange}
			memory = func(kind, typ string, cfg sdk.Config, streams int) int64 {
				if kind == "source" && typ == synthetic.Type {
					return 0
				}
				return a.registry.Memory(kind, typ, cfg, streams)
			}
		}
		pl, d := plan.New(file, plan.Options{Profile: v.Profile, Host: a.host, Memory: memory, Overrides: v.Overrides})
		diags = append(diags, d...)
		if !diags.HasErrors() {
			if show && len(diags) > 0 {
				a.printDiags(file, diags)
			}
			a.redact.learn(pl) // the file's secrets never print, in any record
			return &benchPlanned{Pipeline: pl.Pipelines[0], planFile: file}, nil
		}
	}
	if v.Name != "" {
		fmt.Fprintf(a.stderr, "Error: variant %s:\n", v.Name)
	}
	a.printDiags(file, diags)
	return nil, &exitError{exitInvalid}
}

// pickPipeline returns the named pipeline, or the file's only one.
func pickPipeline(f *pipefile.File, name string) (*pipefile.Pipeline, error) {
	var names []string
	for _, p := range f.Pipelines {
		if p.Name == name || (name == "" && len(f.Pipelines) == 1) {
			return p, nil
		}
		names = append(names, p.Name)
	}
	sort.Strings(names)
	switch {
	case len(names) == 0:
		return nil, errors.New("the file has no pipeline")
	case name == "":
		return nil, fmt.Errorf("the file has %d pipelines (%s): bench one at a time, named by --pipeline", len(names), strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("--pipeline %s: no such pipeline (the file has %s)", name, strings.Join(names, ", "))
}

// benchable refuses pipelines a trial run must not run: restores (they
// overwrite what their sinks hold), and sinks that cannot take back what
// they receive (a database loads it, a command consumes it).
func benchable(p *benchPlanned) error {
	if p.Restores() {
		return fmt.Errorf("pipeline %q restores (it decodes stored data into its sinks); bench tries backups only, since a trial restore would overwrite what its sinks hold", p.Name)
	}
	for _, s := range p.Sinks {
		if !s.Schema.Storage {
			return fmt.Errorf("pipeline %q writes to sink %q, which cannot take back what it receives (a database loads it, a command consumes it); bench writes only to storage (fs, s3, gcs, azure), so point a copy of the pipeline at one", p.Name, s.Type)
		}
		// A key of its own per run: a real run writing the same key while
		// the bench runs would otherwise have its object taken back.
		if s.Key == nil || !s.Key.UsesRunID() {
			return fmt.Errorf("pipeline %q: sink %q's objects have no ${run.id} in their key, so a trial run could take back an object a real run writes to the same key meanwhile; put ${run.id} in the sink's path (e.g. \"backups/${pipeline.name}/${run.id}/\") for the benchmark", p.Name, s.Type)
		}
	}
	return nil
}

// sweep is one --sweep flag.
type sweep struct {
	knob   string
	values []int64
	texts  []string
}

// parseSweeps reads --sweep KNOB=V1,V2 flags.
func parseSweeps(flags []string) ([]sweep, error) {
	var out []sweep
	seen := map[string]bool{}
	for _, f := range flags {
		knob, list, ok := strings.Cut(f, "=")
		knob = strings.TrimSpace(knob)
		if !ok || list == "" {
			return nil, fmt.Errorf("--sweep %q: write --sweep KNOB=V1,V2,… (e.g. workers=1,2,4)", f)
		}
		if !slices.Contains(plan.Knobs, knob) {
			return nil, fmt.Errorf("--sweep %s: no such setting; sweep one of %s", knob, strings.Join(plan.Knobs, ", "))
		}
		if seen[knob] {
			return nil, fmt.Errorf("--sweep %s is given twice: list every value in one flag", knob)
		}
		seen[knob] = true
		s := sweep{knob: knob}
		for _, t := range strings.Split(list, ",") {
			t = strings.TrimSpace(t)
			n, err := knobValue(knob, t)
			if err != nil {
				return nil, fmt.Errorf("--sweep %s=%s: %v", knob, t, err)
			}
			if slices.Contains(s.values, n) {
				return nil, fmt.Errorf("--sweep %s: %s is listed twice", knob, t)
			}
			s.values, s.texts = append(s.values, n), append(s.texts, t)
		}
		out = append(out, s)
	}
	return out, nil
}

// knobValue parses and checks one value of a knob.
func knobValue(knob, t string) (int64, error) {
	switch knob {
	case "chunk_size", "part_size":
		n, _, err := pipefile.ParseSize(t)
		if err != nil {
			return 0, err
		}
		if knob == "chunk_size" && (n < plan.MinChunk || n > plan.MaxChunk) {
			return 0, fmt.Errorf("a chunk size is between 4KiB and 1GiB")
		}
		if n < 1 {
			return 0, fmt.Errorf("give a positive size")
		}
		return n, nil
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a whole number", t)
	}
	switch knob {
	case "workers", "streams", "concurrency":
		if n < 1 || n > 1024 {
			return 0, fmt.Errorf("give between 1 and 1024")
		}
	}
	return n, nil
}

// knobPlace says where a knob is set in the pipeline, "" when nowhere:
// sweeping it would change nothing.
func knobPlace(p *benchPlanned, knob string) string {
	switch knob {
	case "chunk_size", "streams":
		return "pipeline"
	case "workers":
		for _, s := range p.Stages {
			if s.Type == "compress" && s.Codec != "none" || s.Type == "decompress" {
				return s.Type
			}
		}
	case "level":
		if s := p.Stage("compress"); s != nil && s.Codec != "none" {
			return "compress"
		}
	case "part_size", "concurrency":
		for _, e := range append([]*pipefile.Endpoint{p.Source}, p.Sinks...) {
			for _, at := range e.Schema.Attributes {
				if at.Profile == knob {
					return fmt.Sprintf("%s %q", e.Kind, e.Type)
				}
			}
		}
	}
	return ""
}

// checkKnobs refuses sweeps of settings the pipeline does not have.
func checkKnobs(p *benchPlanned, sweeps []sweep) error {
	for _, s := range sweeps {
		if knobPlace(p, s.knob) != "" {
			continue
		}
		switch s.knob {
		case "workers":
			return fmt.Errorf("--sweep workers: pipeline %q has no compress or decompress stage, whose workers it sets", p.Name)
		case "level":
			return fmt.Errorf("--sweep level: pipeline %q does not compress", p.Name)
		default:
			return fmt.Errorf("--sweep %s: none of pipeline %q's endpoints (%s) takes %s; object stores (s3, gcs, azure) do", s.knob, p.Name, endpointTypes(p), s.knob)
		}
	}
	return nil
}

func endpointTypes(p *benchPlanned) string {
	types := []string{p.Source.Type}
	for _, s := range p.Sinks {
		types = append(types, s.Type)
	}
	return strings.Join(types, ", ")
}

// benchVariants is every profile × every combination of the sweeps' values.
func benchVariants(p *benchPlanned, list string, sweeps []sweep, h profiles.Host) ([]variant, error) {
	var names []string
	switch {
	case list != "":
		for _, n := range strings.Split(list, ",") {
			n = strings.TrimSpace(n)
			if _, err := profiles.Resolve(n, h); err != nil {
				return nil, fmt.Errorf("--profiles: %v", err)
			}
			if slices.Contains(names, n) {
				return nil, fmt.Errorf("--profiles: %s is listed twice", n)
			}
			names = append(names, n)
		}
	case len(sweeps) > 0:
		names = []string{fileProfile(p)}
	default:
		for _, pr := range profiles.All(h) {
			names = append(names, pr.Name)
		}
		names = append(names, "auto")
	}
	var out []variant
	for _, name := range names {
		combos := []variant{{Name: name, Profile: name}}
		for _, s := range sweeps {
			var next []variant
			for _, c := range combos {
				for i, val := range s.values {
					ov := map[string]int64{s.knob: val}
					for k, v := range c.Overrides {
						ov[k] = v
					}
					n := s.knob + "=" + s.texts[i]
					if len(names) > 1 || c.Overrides != nil {
						n = c.Name + " " + n
					}
					next = append(next, variant{Name: n, Profile: name, Overrides: ov})
				}
			}
			combos = next
		}
		out = append(out, combos...)
	}
	return out, nil
}

// benchRun is one run of a variant: its result and the time it is
// measured over.
type benchRun struct {
	res  *engine.Result
	wall time.Duration
}

// runWall is the time a run is measured over: up to the moment --duration
// cut it, or up to its end (the take-back of its objects included, which is
// quick next to moving them).
func runWall(res *engine.Result, cut bool, cutAt time.Time) time.Duration {
	end := res.Finished
	if cut && cutAt.Before(end) {
		end = cutAt
	}
	return end.Sub(res.Started)
}

// measure turns a variant's runs into a row: bytes, busy times and wall
// times add up over the runs, so a variant that ran more often is not
// favoured, only measured more precisely.
func measure(v variant, budget int64, runs []benchRun, cut bool) benchRow {
	row := benchRow{variant: v, Runs: len(runs), Cut: cut, Budget: budget}
	var wall time.Duration
	type sum struct {
		engine.MeterReport
		bytes int64
	}
	var sums []sum
	for _, r := range runs {
		wall += r.wall
		row.PeakBuffers = max(row.PeakBuffers, r.res.PeakBuffers)
		row.Buffers = r.res.Layout.Buffers
		for i, m := range r.res.Meters {
			if i == len(sums) {
				sums = append(sums, sum{MeterReport: engine.MeterReport{Name: m.Name, Label: m.Label, Workers: m.Workers}})
			}
			n := m.BytesIn
			if m.Name == "source" {
				n = m.BytesOut
			}
			sums[i].bytes += n
			sums[i].Busy += m.Busy
		}
	}
	row.Seconds = wall.Seconds()
	best := -1.0
	for _, m := range sums {
		st := benchStage{Name: m.Name, Label: m.Label, Workers: m.Workers, Bytes: m.bytes}
		switch {
		case m.Name == "source":
			row.ReadBytes = m.bytes
		case strings.HasPrefix(m.Name, "sink ") && row.StoredBytes == 0:
			row.StoredBytes = m.bytes
		}
		if wall > 0 {
			st.PerSec = float64(st.Bytes) / wall.Seconds()
			st.Utilization = min(1, float64(m.Busy)/(float64(wall)*float64(max(1, m.Workers))))
		}
		if st.Utilization > best {
			best, row.Bottleneck = st.Utilization, m.Name
		}
		row.Stages = append(row.Stages, st)
	}
	if wall > 0 {
		row.ReadPerSec = float64(row.ReadBytes) / wall.Seconds()
		row.StoredPerSec = float64(row.StoredBytes) / wall.Seconds()
	}
	return row
}

// recommend picks the fastest variant or, among those within 5% of it, the
// one with the smallest memory budget (the faster on a tie).
func recommend(rows []benchRow) (int, string) {
	fastest := 0
	for i, r := range rows {
		if r.ReadPerSec > rows[fastest].ReadPerSec {
			fastest = i
		}
	}
	pick := fastest
	for i, r := range rows {
		if r.ReadPerSec >= 0.95*rows[fastest].ReadPerSec && (r.Budget < rows[pick].Budget || r.Budget == rows[pick].Budget && r.ReadPerSec > rows[pick].ReadPerSec) {
			pick = i
		}
	}
	rate := func(r benchRow) string { return pipefile.HumanSize(int64(r.ReadPerSec)) + "/s" }
	var reason string
	switch {
	case len(rows) == 1:
		reason = fmt.Sprintf("the only variant tried (%s)", rate(rows[0]))
	case pick == fastest:
		second := -1
		for i, r := range rows {
			if i != fastest && (second < 0 || r.ReadPerSec > rows[second].ReadPerSec) {
				second = i
			}
		}
		reason = fmt.Sprintf("the fastest (%s)", rate(rows[fastest]))
		if s := rows[second]; s.ReadPerSec > 0 {
			reason += fmt.Sprintf(", %.0f%% ahead of %s", 100*(rows[fastest].ReadPerSec/s.ReadPerSec-1), s.Name)
		}
	default:
		reason = fmt.Sprintf("within 5%% of the fastest, %s (%s against %s), with a memory budget of %s instead of %s",
			rows[fastest].Name, rate(rows[pick]), rate(rows[fastest]), pipefile.HumanSize(rows[pick].Budget), pipefile.HumanSize(rows[fastest].Budget))
	}
	// Speed bought with a worse ratio (a lower compression level) costs
	// storage: say so.
	bestRatio := pick
	for i, r := range rows {
		if r.StoredBytes > 0 && ratio(r) > ratio(rows[bestRatio]) {
			bestRatio = i
		}
	}
	if rp, rb := ratio(rows[pick]), ratio(rows[bestRatio]); rp > 0 && rb > rp*1.05 {
		reason += fmt.Sprintf("; it stores %.0f%% more than %s (%.2f× against %.2f×)", 100*(rb/rp-1), rows[bestRatio].Name, rp, rb)
	}
	return pick, reason
}

// ratio is how much smaller the stored bytes are than the bytes read.
func ratio(r benchRow) float64 {
	if r.StoredBytes == 0 {
		return 0
	}
	return float64(r.ReadBytes) / float64(r.StoredBytes)
}

// fileProfile is the profile the file names (as written: "auto" stays
// "auto"), or the default's name.
func fileProfile(p *benchPlanned) string {
	if p.ProfileFrom == "file" {
		if s := p.Def.Attrs.String("profile"); s != "" {
			return s
		}
	}
	return p.Profile.Name
}

// settingLines are the lines that make the file run as variant v.
func settingLines(p *benchPlanned, v variant) []string {
	var out []string
	if v.Profile != fileProfile(p) {
		out = append(out, fmt.Sprintf("pipeline %q { profile = %q }", p.Name, v.Profile))
	}
	for _, k := range slices.Sorted(maps.Keys(v.Overrides)) {
		val := strconv.FormatInt(v.Overrides[k], 10)
		if k == "chunk_size" || k == "part_size" {
			// Exact, as a file says it ("1MiB"; "1000" when no unit divides it).
			val = strconv.Quote(strings.TrimSuffix(sdk.FormatSize(v.Overrides[k]), " bytes"))
		}
		if k == "part_size" || k == "concurrency" {
			for _, e := range append([]*pipefile.Endpoint{p.Source}, p.Sinks...) {
				for _, at := range e.Schema.Attributes {
					if at.Profile == k {
						out = append(out, fmt.Sprintf("%s %q { %s = %s }", e.Kind, e.Type, at.Name, val))
					}
				}
			}
			continue
		}
		switch place := knobPlace(p, k); place {
		case "pipeline":
			out = append(out, fmt.Sprintf("pipeline %q { %s = %s }", p.Name, k, val))
		default:
			out = append(out, fmt.Sprintf("%s { %s = %s }", place, k, val))
		}
		if k == "chunk_size" {
			for _, s := range p.Stages {
				if s.Explicit["chunk_size"] {
					out = append(out, fmt.Sprintf("%s { chunk_size = %s }", s.Type, val))
				}
			}
		}
	}
	return out
}

// writeRecommendation puts the recommended profile into the file, or says
// why it did not.
func (a *app) writeRecommendation(p *benchPlanned, v variant, synthetic bool) string {
	if len(v.Overrides) > 0 {
		return "nothing written: the recommendation sets " + strings.Join(slices.Sorted(maps.Keys(v.Overrides)), ", ") + ", not only a profile; add the settings above yourself"
	}
	if p.ProfileFrom == "file" && fileProfile(p) == v.Profile {
		return fmt.Sprintf("nothing written: pipeline %q already has profile = %q", p.Name, v.Profile)
	}
	file := p.Def.Range.Filename
	if err := writeProfile(file, p.Name, v.Profile); err != nil {
		return "nothing written: " + err.Error()
	}
	msg := fmt.Sprintf("wrote profile = %q into pipeline %q of %s", v.Profile, p.Name, file)
	if synthetic {
		msg += " (measured on synthetic data)"
	}
	return msg
}

// writeProfile sets profile = "name" in the pipeline block of the file,
// touching nothing else: the value of an existing literal profile is
// replaced; otherwise a line is added at the top of the block. Comments
// and formatting stay as they are.
func writeProfile(path, pipeline, profile string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return fmt.Errorf("%s no longer parses: %s", path, diags.Error())
	}
	var block *hclsyntax.Block
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type == "pipeline" && len(b.Labels) == 1 && b.Labels[0] == pipeline {
			block = b
		}
	}
	if block == nil {
		return fmt.Errorf("%s has no pipeline %q block", path, pipeline)
	}
	value := strconv.Quote(profile)
	var out []byte
	if attr, ok := block.Body.Attributes["profile"]; ok {
		if v, d := attr.Expr.Value(nil); d.HasErrors() || v.Type().FriendlyName() != "string" {
			return fmt.Errorf("profile in %s is an expression (%s); set it to %s yourself", path, attr.Expr.Range(), value)
		}
		r := attr.Expr.Range()
		out = append(append(append(out, src[:r.Start.Byte]...), value...), src[r.End.Byte:]...)
	} else {
		at := block.OpenBraceRange.End.Byte
		nl := strings.IndexByte(string(src[at:]), '\n')
		if nl < 0 || strings.TrimSpace(string(src[at:at+nl])) != "" {
			return fmt.Errorf("pipeline %q in %s is written on one line; add profile = %s yourself", pipeline, path, value)
		}
		at += nl + 1
		// Indent as the block's first line (one step more than its closing
		// brace), and keep the new line out of the alignment of the
		// attributes that follow.
		lines := strings.Split(string(src[at:]), "\n")
		ref := ""
		for _, l := range lines {
			if strings.TrimSpace(l) != "" {
				ref = l
				break
			}
		}
		indent := ref[:len(ref)-len(strings.TrimLeft(ref, " \t"))]
		if t := strings.TrimSpace(ref); t == "}" || t == "" {
			indent += "  "
		}
		ins := indent + "profile = " + value + "\n"
		if t := strings.TrimSpace(lines[0]); t != "" && t != "}" {
			ins += "\n"
		}
		out = append(append(append(out, src[:at]...), ins...), src[at:]...)
	}
	if _, d := hclsyntax.ParseConfig(out, path, hcl.InitialPos); d.HasErrors() {
		return fmt.Errorf("the edited file would not parse (%s); add profile = %s yourself", d.Error(), value)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pipe-bench-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// printBench writes the variants' table, their stages' utilization and the
// recommendation.
func printBench(w io.Writer, rep *benchReport) {
	size := pipefile.HumanSize
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "variant\ttime\tread/s\tstored/s\tratio\tbottleneck\tbudget\tpeak RSS\n")
	anyCut := false
	for _, r := range rep.Variants {
		t := seconds(r.Seconds)
		if r.Runs > 1 {
			t += fmt.Sprintf(" (%d runs)", r.Runs)
		}
		if r.Cut {
			t += "*"
			anyCut = true
		}
		rss := "?"
		if r.PeakRSS >= 0 {
			rss = size(r.PeakRSS)
		}
		bn := r.Bottleneck
		for _, s := range r.Stages {
			if s.Name == r.Bottleneck {
				bn = fmt.Sprintf("%s %.0f%%", s.Name, 100*s.Utilization)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/s\t%s/s\t%.2f×\t%s\t%s\t%s\n", r.Name, t, size(int64(r.ReadPerSec)), size(int64(r.StoredPerSec)), ratio(r), bn, size(r.Budget), rss)
	}
	tw.Flush()
	if anyCut {
		fmt.Fprintf(w, "* cut by --duration %s; measured over the bytes it moved\n", time.Duration(rep.Limit*float64(time.Second)))
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "utilization")
	for _, s := range rep.Variants[0].Stages {
		fmt.Fprintf(tw, "\t%s", s.Name)
	}
	fmt.Fprintln(tw)
	for _, r := range rep.Variants {
		fmt.Fprint(tw, r.Name)
		for _, s := range r.Stages {
			cell := fmt.Sprintf("%.0f%%", 100*s.Utilization)
			if s.Workers > 1 {
				cell += fmt.Sprintf(" ×%d", s.Workers)
			}
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w, "(busy time ÷ (time × workers); peak RSS: pipe and its plugin processes)")

	fmt.Fprintf(w, "\nrecommended: %s — %s\n", rep.Recommended, rep.Reason)
	if len(rep.Settings) > 0 && (rep.Written == "" || strings.HasPrefix(rep.Written, "nothing written")) {
		fmt.Fprintln(w, "to use it, set in the file:")
		for _, s := range rep.Settings {
			fmt.Fprintln(w, "  "+s)
		}
	}
	if rep.Written != "" {
		fmt.Fprintln(w, rep.Written)
	}
}

// seconds formats a run's time: milliseconds under a second.
func seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%.1fs", s)
}

// resetPeakRSS starts a new measure of the peak resident memory of pipe
// and its plugin processes: the kernel's high-water mark (VmHWM) is reset
// to the current RSS (Linux; elsewhere nothing happens and peakRSS says
// it does not know).
func resetPeakRSS() {
	runtime.GC()
	debug.FreeOSMemory()
	for _, pid := range selfAndChildren() {
		_ = os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	}
}

// peakRSS is the sum of the peaks of pipe and its plugin processes since
// resetPeakRSS, or -1. Each process's peak may come at a different moment,
// so the sum bounds the peak of the whole from above.
func peakRSS() int64 {
	var total int64 = -1
	for _, pid := range selfAndChildren() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				total = max(total, 0) + kb<<10
			}
		}
	}
	return total
}

// selfAndChildren lists this process and its children (the plugin
// processes) from /proc; only this process where /proc is missing.
func selfAndChildren() []int {
	self := os.Getpid()
	pids := []int{self}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return pids
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) >= 2 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == self {
				pids = append(pids, pid)
			}
		}
	}
	return pids
}
