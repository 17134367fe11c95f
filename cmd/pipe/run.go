package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/notify"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/runner"
)

// runFlags are pipe run's flags.
type runFlags struct {
	load                 loadFlags
	metrics              metricsFlags
	progress, cpuprofile string
	runID, before        string
	keepGoing            bool
}

func (a *app) runCmd() *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run FILE.hcl",
		Short: "Run the pipelines of a file",
		Long: `run executes the file's pipelines in order (or those named by --pipeline).
Each stream's objects are committed only when the stream ended cleanly; a
backup's manifest is written last. A failed or interrupted run leaves
nothing at a final path. A restore (a source that holds manifests) follows
the newest run's manifest and verifies each object against its recorded
SHA-256.

A pipeline that fails stops the run: the pipelines after it are skipped
(and named), unless --keep-going, which runs each and reports each. A
source whose streams stand alone (the postgres source's databases) stores
the streams that succeeded when others fail, under a manifest that names
the failed ones; that pipeline still counts as failed.

Exit code 0 when every pipeline succeeded; 1 when one failed; 2 for an
invalid file or flags; 130 when interrupted (SIGINT, SIGTERM).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.run(cmd.Context(), args[0], &f)
		},
	}
	f.load.register(cmd, true, true, true)
	f.metrics.register(cmd)
	cmd.Flags().StringVar(&f.progress, "progress", "auto", "live progress on stderr: auto (on a terminal), always, never")
	cmd.Flags().StringVar(&f.runID, "run", "", "restore this run (its id, as pipe backups lists it), beating the source's run and before")
	cmd.Flags().StringVar(&f.before, "before", "", `restore the newest run that finished before this time ("2026-11-20T06:00:00Z", "2026-11-20")`)
	cmd.Flags().BoolVar(&f.keepGoing, "keep-going", false, "run every pipeline even after one failed, and report each")
	cmd.Flags().StringVar(&f.cpuprofile, "cpuprofile", "", "write a Go CPU profile of the run to this file")
	_ = cmd.Flags().MarkHidden("cpuprofile") // fails only for a flag not defined
	return cmd
}

// selection checks pipe run's flags and returns the run --run or --before
// chooses; a mistake is said on stderr, and exits with code 2.
func (a *app) selection(f *runFlags) (catalog.Selection, error) {
	var sel catalog.Selection
	sel.RunID = f.runID
	if f.before != "" {
		t, err := pipefile.ParseTime(f.before)
		if err != nil {
			fmt.Fprintf(a.stderr, "Error: --before: %v\n", err)
			return sel, &exitError{exitInvalid}
		}
		sel.Before = t
	}
	if f.runID != "" && f.before != "" {
		fmt.Fprintln(a.stderr, "Error: give --run or --before, not both")
		return sel, &exitError{exitInvalid}
	}
	if f.progress != "auto" && f.progress != "always" && f.progress != "never" {
		fmt.Fprintf(a.stderr, "Error: --progress %q: give auto (on a terminal), always or never\n", f.progress)
		return sel, &exitError{exitInvalid}
	}
	return sel, nil
}

// pipeRun is what the pipelines of one pipe run share.
type pipeRun struct {
	runID   string
	sel     catalog.Selection
	plan    *plan.Plan
	mx      *runMetrics
	secrets []string
	// note tells the file's notify targets of each pipeline's run.
	note *notify.Notifier
	// json: --json; jsonLog: records replace the summary on stderr;
	// progress: show a progress bar.
	json, jsonLog, progress bool
}

// run is pipe run: it runs the file's pipelines in order, and reports
// each.
func (a *app) run(parent context.Context, path string, f *runFlags) error {
	sel, err := a.selection(f)
	if err != nil {
		return err
	}
	if f.cpuprofile != "" {
		stop, err := startCPUProfile(f.cpuprofile)
		if err != nil {
			return err
		}
		defer stop()
	}
	r := &pipeRun{runID: newRunID(time.Now()), sel: sel, json: f.load.json}
	if r.plan, err = a.load(path, &f.load, r.runID); err != nil {
		return err
	}
	if r.mx, err = a.startMetrics(&f.metrics, path); err != nil {
		return err
	}
	defer r.mx.close() // after the last pipeline: the textfile, the push
	ctx, stop := a.notifyInterrupt(parent)
	defer stop()
	r.jsonLog = a.logf.format == "json"
	r.progress = f.progress == "always" || (f.progress == "auto" && !r.json && !r.jsonLog && isTerminal(a.stderr))
	r.secrets = r.plan.File.Secrets()
	r.note = a.notifier(r.plan.File, r.secrets)
	defer r.note.Close()
	reports, skipped, failed := a.runPipelines(ctx, r, f.keepGoing)
	return a.runEnded(ctx, r, reports, skipped, failed)
}

// startCPUProfile writes a Go CPU profile to path until stop.
func startCPUProfile(path string) (stop func(), err error) {
	pf, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(pf); err != nil {
		pf.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		pf.Close()
	}, nil
}

// notifyInterrupt is parent, done on SIGINT or SIGTERM: the run then
// aborts, and says so; stop waits for that to be said.
func (a *app) notifyInterrupt(parent context.Context) (ctx context.Context, stop func()) {
	ctx, stopNotify := signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM)
	noticed := make(chan struct{})
	context.AfterFunc(ctx, func() {
		defer close(noticed)
		if !interrupted(ctx) {
			return // the run ended
		}
		// Aborting uploads can take a while against a slow store; a
		// second signal quits at once (the default action).
		stopNotify()
		a.log.Warn(fmt.Sprintf("%v: aborting the run and taking back what it wrote; interrupt again to quit at once (which can leave temporary data behind)", context.Cause(ctx)))
	})
	return ctx, func() {
		if interrupted(ctx) {
			<-noticed
		}
		stopNotify()
	}
}

// runPipelines runs the pipelines in order; after one failed, it skips
// the rest unless keepGoing. It returns each run's summary, the
// pipelines skipped, and whether one failed.
func (a *app) runPipelines(ctx context.Context, r *pipeRun, keepGoing bool) (reports []runSummary, skipped []string, failed bool) {
	for _, pp := range r.plan.Pipelines {
		runner.SetMemoryLimit(pp)
		if failed && !keepGoing {
			skipped = append(skipped, pp.Name)
			continue
		}
		s, err := a.runPipeline(ctx, r, pp)
		reports = append(reports, s)
		if err != nil {
			failed = true
		}
	}
	return reports, skipped, failed
}

// runPipeline runs one pipeline with the metrics watching, and reports
// it: its summary on stderr (or a record, or nothing with --json), then
// its error.
func (a *app) runPipeline(ctx context.Context, r *pipeRun, pp *plan.Pipeline) (runSummary, error) {
	o := runner.Options{RunID: r.runID, Registry: a.registry, Select: r.sel, WALArchive: r.plan.WALArchive(pp),
		Warn:  func(msg string) { a.log.Warn(msg, "pipeline", pp.Name) },
		Scrub: func(msg string) string { return scrub(msg, r.secrets) }}
	if r.progress {
		o.Progress = newProgressBar(a.stderr)
	}
	o.Progress = r.mx.progress(o.Progress)
	r.mx.begin(pp)
	a.logf.onRetryDo(func(endpoint string) { r.mx.retried(pp.Name, endpoint) })
	a.log.Info("pipeline started", "pipeline", pp.Name, "run_id", r.runID, "profile", pp.Profile.Name, "streams_at_once", pp.Streams, "memory_budget_bytes", pp.Budget())
	r.note.Send(r.event(pp, notify.Start))
	rep, err := a.hooked(ctx, r, pp, o)
	r.mx.finish(pp, rep, err)
	s := summarize(pp, rep, err, r.secrets)
	if r.jsonLog {
		a.logFinished(s)
	} else if !r.json {
		a.printSummary(s)
	}
	if err != nil {
		var de *runner.DiagError
		if errors.As(err, &de) {
			a.printDiags(r.plan.File, de.Diags)
		} else if !r.json && !r.jsonLog {
			fmt.Fprintln(a.stderr, "Error:", s.Error)
		}
	}
	r.notifyEnded(pp, s)
	if err != nil {
		a.failureHook(ctx, r, pp, s)
	}
	r.note.Flush() // at most the targets' timeouts
	return s, err
}

// runEnded names the pipelines skipped, writes the JSON report with
// --json, and returns the exit code's error.
func (a *app) runEnded(ctx context.Context, r *pipeRun, reports []runSummary, skipped []string, failed bool) error {
	if len(skipped) > 0 {
		names := make([]string, len(skipped))
		for i, n := range skipped {
			names[i] = strconv.Quote(n)
		}
		a.log.Error(fmt.Sprintf("pipelines skipped after the failure: %s (--keep-going runs them)", strings.Join(names, ", ")))
	}
	if r.json {
		out := map[string]any{"run_id": r.runID, "ok": !failed, "pipelines": reports}
		if len(skipped) > 0 {
			out["skipped_pipelines"] = skipped
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	}
	switch {
	case ctx.Err() != nil:
		return &exitError{exitInterrupted}
	case failed:
		return &exitError{exitFailed}
	}
	return nil
}

// interrupted reports whether a signal ended ctx: its cause is then the
// signal's error (which wraps context.Canceled), not context.Canceled
// itself.
func interrupted(ctx context.Context) bool {
	return ctx.Err() != nil && context.Cause(ctx) != context.Canceled
}

// scrub replaces every secret in msg.
func scrub(msg string, secrets []string) string { return sdk.Scrub(msg, secrets...) }
