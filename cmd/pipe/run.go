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
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/runner"
)

func (a *app) runCmd() *cobra.Command {
	var f loadFlags
	var mf metricsFlags
	var progress, cpuprofile, runFlag, beforeFlag string
	var keepGoing bool
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
			var sel catalog.Selection
			sel.RunID = runFlag
			if beforeFlag != "" {
				t, err := pipefile.ParseTime(beforeFlag)
				if err != nil {
					fmt.Fprintf(a.stderr, "Error: --before: %v\n", err)
					return &exitError{exitInvalid}
				}
				sel.Before = t
			}
			if runFlag != "" && beforeFlag != "" {
				fmt.Fprintln(a.stderr, "Error: give --run or --before, not both")
				return &exitError{exitInvalid}
			}
			if progress != "auto" && progress != "always" && progress != "never" {
				fmt.Fprintf(a.stderr, "Error: --progress %q: give auto (on a terminal), always or never\n", progress)
				return &exitError{exitInvalid}
			}
			if cpuprofile != "" {
				pf, err := os.Create(cpuprofile)
				if err != nil {
					return err
				}
				defer pf.Close()
				if err := pprof.StartCPUProfile(pf); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			runID := newRunID(time.Now())
			p, err := a.load(args[0], &f, runID)
			if err != nil {
				return err
			}
			mx, err := a.startMetrics(&mf, args[0])
			if err != nil {
				return err
			}
			defer mx.close() // after the last pipeline: the textfile, the push
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			noticed := make(chan struct{})
			context.AfterFunc(ctx, func() {
				defer close(noticed)
				if !interrupted(ctx) {
					return // the run ended
				}
				// Aborting uploads can take a while against a slow store; a
				// second signal quits at once (the default action).
				stop()
				a.log.Warn(fmt.Sprintf("%v: aborting the run and taking back what it wrote; interrupt again to quit at once (which can leave temporary data behind)", context.Cause(ctx)))
			})
			defer func() {
				if interrupted(ctx) {
					<-noticed
				}
			}()
			jsonLog := a.logf.format == "json" // records replace the summary on stderr
			showProgress := progress == "always" || (progress == "auto" && !f.json && !jsonLog && isTerminal(a.stderr))
			secrets := p.File.Secrets()
			var reports []runSummary
			var skipped []string
			failed := false
			for _, pp := range p.Pipelines {
				runner.SetMemoryLimit(pp)
				if failed && !keepGoing {
					skipped = append(skipped, pp.Name)
					continue
				}
				o := runner.Options{RunID: runID, Registry: a.registry, Select: sel, WALArchive: p.WALArchive(pp),
					Warn:  func(msg string) { a.log.Warn(msg, "pipeline", pp.Name) },
					Scrub: func(msg string) string { return scrub(msg, secrets) }}
				if showProgress {
					o.Progress = newProgressBar(a.stderr)
				}
				o.Progress = mx.progress(o.Progress)
				mx.begin(pp)
				a.logf.onRetryDo(func(endpoint string) { mx.retried(pp.Name, endpoint) })
				a.log.Info("pipeline started", "pipeline", pp.Name, "run_id", runID, "profile", pp.Profile.Name, "streams_at_once", pp.Streams, "memory_budget_bytes", pp.Budget())
				rep, err := runner.Run(ctx, pp, o)
				mx.finish(pp, rep, err)
				s := summarize(pp, rep, err, secrets)
				reports = append(reports, s)
				if jsonLog {
					a.logFinished(s)
				} else if !f.json {
					a.printSummary(s)
				}
				if err != nil {
					var de *runner.DiagError
					if errors.As(err, &de) {
						a.printDiags(p.File, de.Diags)
					} else if !f.json && !jsonLog {
						fmt.Fprintln(a.stderr, "Error:", s.Error)
					}
					failed = true
				}
			}
			if len(skipped) > 0 {
				names := make([]string, len(skipped))
				for i, n := range skipped {
					names[i] = strconv.Quote(n)
				}
				a.log.Error(fmt.Sprintf("pipelines skipped after the failure: %s (--keep-going runs them)", strings.Join(names, ", ")))
			}
			if f.json {
				out := map[string]any{"run_id": runID, "ok": !failed, "pipelines": reports}
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
		},
	}
	f.register(cmd, true, true, true)
	mf.register(cmd)
	cmd.Flags().StringVar(&progress, "progress", "auto", "live progress on stderr: auto (on a terminal), always, never")
	cmd.Flags().StringVar(&runFlag, "run", "", "restore this run (its id, as pipe backups lists it), beating the source's run and before")
	cmd.Flags().StringVar(&beforeFlag, "before", "", `restore the newest run that finished before this time ("2026-11-20T06:00:00Z", "2026-11-20")`)
	cmd.Flags().BoolVar(&keepGoing, "keep-going", false, "run every pipeline even after one failed, and report each")
	cmd.Flags().StringVar(&cpuprofile, "cpuprofile", "", "write a Go CPU profile of the run to this file")
	_ = cmd.Flags().MarkHidden("cpuprofile") // fails only for a flag not defined
	return cmd
}

// interrupted reports whether a signal ended ctx: its cause is then the
// signal's error (which wraps context.Canceled), not context.Canceled
// itself.
func interrupted(ctx context.Context) bool {
	return ctx.Err() != nil && context.Cause(ctx) != context.Canceled
}

// scrub replaces every secret in msg.
func scrub(msg string, secrets []string) string { return sdk.Scrub(msg, secrets...) }
