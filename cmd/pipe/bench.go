package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
	"github.com/pipebackup/pipe/synthetic"
	"github.com/pipebackup/pipe/tune"
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

// benchInput is what pipe bench's flags say, checked: the file's
// variables, the bytes of each --synthetic stream (0 without), the sweeps.
type benchInput struct {
	vars      map[string]string
	synthSize int64
	sweeps    []tune.Sweep
}

// benchFail says what is wrong with the bench's flags or file on stderr,
// and exits with code 2.
func (a *app) benchFail(format string, args ...any) error {
	fmt.Fprintf(a.stderr, "Error: "+format+"\n", args...)
	return &exitError{exitInvalid}
}

// bench is pipe bench: it measures each variant of the pipeline and
// recommends one.
func (a *app) bench(parent context.Context, path string, o *benchOptions) error {
	in, err := a.benchFlags(o)
	if err != nil {
		return err
	}
	if _, err := a.openRegistry(); err != nil {
		return err
	}
	first, variants, err := a.benchVariants(path, o, in)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep := tune.Report{File: path, Pipeline: first.Name, Host: tune.Host{CPUs: a.host.CPUs, Memory: a.host.Memory}, Limit: o.duration.Seconds(), Source: first.Source.Type}
	if in.synthSize > 0 {
		rep.Source = fmt.Sprintf("synthetic: %s × %s", plan.Plural(o.synthStreams, "stream"), pipefile.HumanSize(in.synthSize))
	}
	fmt.Fprintf(a.stderr, "bench: pipeline %q of %s, %s, on %d CPUs; %s, up to %s each\n",
		first.Name, path, rep.Source, a.host.CPUs, plan.Plural(len(variants), "variant"), o.duration)
	trials := a.benchTrials(path, o, in)
	for i, v := range variants {
		row, err := trials.Measure(ctx, v)
		if err != nil {
			return a.benchFailed(ctx, v, o, err)
		}
		rep.Variants = append(rep.Variants, row)
		a.printVariant(i+1, len(variants), v, row)
	}

	best, reason := tune.Recommend(rep.Variants)
	rep.Recommended, rep.Reason = rep.Variants[best].Name, reason
	rec := rep.Variants[best]
	rep.Settings = tune.SettingLines(first, rec.Variant)
	if o.write {
		rep.Written = tune.WriteRecommendation(first, rec.Variant, in.synthSize > 0)
	}
	if o.load.json {
		return writeJSON(a.stdout, rep)
	}
	tune.Print(a.stdout, &rep)
	return nil
}

// benchFlags checks pipe bench's flags.
func (a *app) benchFlags(o *benchOptions) (*benchInput, error) {
	vars, err := parseVars(o.load.vars)
	if err != nil {
		return nil, a.benchFail("%v", err)
	}
	if o.duration <= 0 {
		return nil, a.benchFail("--duration %s: give a positive duration, e.g. 20s", o.duration)
	}
	in := &benchInput{vars: vars}
	if o.synthetic != "" {
		if in.synthSize, _, err = hclvalue.ParseSize(o.synthetic); err != nil || in.synthSize <= 0 {
			return nil, a.benchFail("--synthetic %s: give the bytes of each stream, e.g. 1GiB", o.synthetic)
		}
		if o.synthStreams < 1 || o.synthStreams > 1024 {
			return nil, a.benchFail("--synthetic-streams %d: give between 1 and 1024 streams", o.synthStreams)
		}
	}
	if in.sweeps, err = tune.ParseSweeps(o.sweeps); err != nil {
		return nil, a.benchFail("%v", err)
	}
	return in, nil
}

// benchVariants plans the file's bench pipeline as the file says, which
// checks the file and picks the pipeline, and then once for each variant
// to try (a plan fills in its endpoints' values, so each variant's run
// loads and plans it again).
func (a *app) benchVariants(path string, o *benchOptions, in *benchInput) (*tune.Planned, []tune.Variant, error) {
	first, err := a.benchPlan(path, in.vars, "", tune.Variant{}, o, true)
	if err != nil {
		return nil, nil, err
	}
	if err := tune.Benchable(first); err != nil {
		return nil, nil, a.benchFail("pipe bench %s: %v", path, err)
	}
	if err := tune.CheckKnobs(first, in.sweeps); err != nil {
		return nil, nil, a.benchFail("%v", err)
	}
	variants, err := tune.Variants(first, o.profiles, in.sweeps, a.host)
	if err != nil {
		return nil, nil, a.benchFail("%v", err)
	}
	for _, v := range variants {
		if _, err := a.benchPlan(path, in.vars, "", v, o, false); err != nil {
			return nil, nil, err
		}
	}
	return first, variants, nil
}

// benchTrials runs the variants: each plans the pipeline afresh and runs
// it as a trial, its warnings logged once.
func (a *app) benchTrials(path string, o *benchOptions, in *benchInput) *tune.Trials {
	warned := map[string]bool{}
	warn := func(msg string) {
		if !warned[msg] {
			warned[msg] = true
			a.log.Warn(msg) // redacted, in the chosen log format, as pipe run's
		}
	}
	return &tune.Trials{
		Duration: o.duration,
		RunID:    func() string { return newRunID(time.Now()) },
		Plan: func(runID string, v tune.Variant) (*tune.Planned, error) {
			return a.benchPlan(path, in.vars, runID, v, o, false)
		},
		Options: func(p *tune.Planned) runner.Options {
			secrets := p.File.Secrets()
			ro := runner.Options{Registry: a.registry, Warn: func(msg string) { warn(scrub(msg, secrets)) }}
			if in.synthSize > 0 {
				ro.Source = synthetic.New(o.synthStreams, in.synthSize)
			}
			return ro
		},
	}
}

// printVariant prints the measure of the n-th of count variants.
func (a *app) printVariant(n, count int, v tune.Variant, row tune.Row) {
	how := pipefile.HumanSize(row.ReadBytes) + " read"
	switch {
	case row.Cut:
		how += ", cut by --duration"
	case row.Runs > 1:
		how += fmt.Sprintf(" in %d runs", row.Runs)
	}
	fmt.Fprintf(a.stderr, "bench: [%d/%d] %s: %s/s in %s (%s), bottleneck %s\n", n, count, v.Name,
		pipefile.HumanSize(int64(row.ReadPerSec)), tune.Seconds(row.Seconds), how, row.Bottleneck)
}

// benchFailed says why variant v could not be measured and returns the
// exit code's error.
func (a *app) benchFailed(ctx context.Context, v tune.Variant, o *benchOptions, err error) error {
	var re *tune.RunError
	switch {
	case errors.Is(err, tune.ErrInterrupted):
		fmt.Fprintf(a.stderr, "%v: the bench stopped; what the variant wrote was taken back\n", context.Cause(ctx))
		return &exitError{exitInterrupted}
	case errors.Is(err, tune.ErrNothingMoved):
		fmt.Fprintf(a.stderr, "Error: variant %s: --duration %s ended before the run moved any data (configuring the endpoints took that long): give a longer --duration\n", v.Name, o.duration)
		return &exitError{exitInvalid}
	case errors.As(err, &re):
		var de *runner.DiagError
		if errors.As(re.Err, &de) {
			a.printDiags(re.Planned.File, de.Diags)
		} else {
			fmt.Fprintf(a.stderr, "Error: variant %s: %s\n", v.Name, scrub(re.Err.Error(), re.Planned.File.Secrets()))
		}
		return &exitError{exitFailed}
	}
	return err // planning failed: its diagnostics are printed
}

// benchPlan loads and plans the file's bench pipeline for variant v (the
// zero variant: as the file says). Diagnostics are printed when there are
// errors, warnings only when show is set.
func (a *app) benchPlan(path string, vars map[string]string, runID string, v tune.Variant, o *benchOptions, show bool) (*tune.Planned, error) {
	file, diags := pipefile.Load(path, pipefile.Options{Vars: vars, RunID: runID, Now: time.Now(), Schemas: a.registry})
	if !diags.HasErrors() {
		def, err := tune.PickPipeline(file, o.pipeline)
		if err != nil {
			fmt.Fprintf(a.stderr, "Error: %s: %v\n", path, err)
			return nil, &exitError{exitInvalid}
		}
		file.Pipelines = []*pipefile.Pipeline{def}
		memory := a.registry.Memory
		if o.synthetic != "" {
			memory = tune.Synthesize(def, memory)
		}
		pl, d := plan.New(file, plan.Options{Profile: v.Profile, Host: a.host, Memory: memory, Overrides: v.Overrides})
		diags = append(diags, d...)
		if !diags.HasErrors() {
			if show && len(diags) > 0 {
				a.printDiags(file, diags)
			}
			a.redact.learn(pl) // the file's secrets never print, in any record
			return &tune.Planned{Pipeline: pl.Pipelines[0], File: file}, nil
		}
	}
	if v.Name != "" {
		fmt.Fprintf(a.stderr, "Error: variant %s:\n", v.Name)
	}
	a.printDiags(file, diags)
	return nil, &exitError{exitInvalid}
}
