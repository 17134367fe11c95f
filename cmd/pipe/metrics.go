package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/binlog"
	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/internal/version"
	"github.com/pipebackup/pipe/metrics"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/runner"
	"github.com/pipebackup/pipe/wal"
)

// metricsFlags are pipe run's Prometheus flags.
type metricsFlags struct {
	addr, textfile, pushgateway string
	labels                      []string
}

func (f *metricsFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.addr, "metrics-addr", "", "serve Prometheus metrics on `ADDR` (host:port or :port; port 0 picks one) at /metrics while the run goes on")
	cmd.Flags().StringVar(&f.textfile, "metrics-textfile", "", "write the final metrics to `PATH` (a *.prom file) for node_exporter's textfile collector, also when the run fails")
	cmd.Flags().StringVar(&f.pushgateway, "pushgateway", "", "push the final metrics to the Prometheus Pushgateway at `URL` (http://host:9091) as job \"pipe\", a group per pipeline keyed by the file's name, the pipeline and --metrics-label")
	cmd.Flags().StringArrayVar(&f.labels, "metrics-label", nil, "put `NAME=VALUE` on every metric and in the Pushgateway's grouping key, e.g. database=shop (repeatable)")
}

func (f *metricsFlags) set() bool {
	return f.addr != "" || f.textfile != "" || f.pushgateway != ""
}

// labelName is what Prometheus takes as a label name; pipe's own labels
// and the Pushgateway's job are taken.
var (
	labelName      = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
	reservedLabels = []string{"pipeline", "stage", "direction", "endpoint", "version", "job", "file", "archive", "operation", "result", "from", "system_identifier", "timeline"}
)

// runMetrics is the metrics of one pipe run; a nil *runMetrics (no
// metrics flag given) does nothing.
type runMetrics struct {
	a    *app
	f    metricsFlags
	m    *metrics.Metrics
	srv  *metrics.Server
	file string // the pipeline file's base name: the Pushgateway's grouping
	push string // the Pushgateway's URL without credentials, to print
}

// startMetrics checks the metrics flags and starts serving, before any
// pipeline runs: a bad flag, a busy address or a textfile directory that
// is not there fails the command with exit code 2.
func (a *app) startMetrics(f *metricsFlags, file string) (*runMetrics, error) {
	if !f.set() {
		if len(f.labels) > 0 {
			a.log.Warn("--metrics-label does nothing without --metrics-addr, --metrics-textfile or --pushgateway")
		}
		return nil, nil
	}
	fail := func(format string, args ...any) (*runMetrics, error) {
		fmt.Fprintf(a.stderr, "Error: "+format+"\n", args...)
		return nil, &exitError{exitInvalid}
	}
	labels := map[string]string{}
	for _, l := range f.labels {
		name, value, ok := strings.Cut(l, "=")
		switch {
		case !ok || !labelName.MatchString(name) || strings.HasPrefix(name, "__"):
			return fail("--metrics-label %q: write --metrics-label name=value, the name of letters, digits and _, not starting with a digit or __", l)
		case slices.Contains(reservedLabels, name):
			return fail("--metrics-label %s: pipe sets %s itself; choose another name (taken: %s)", name, name, strings.Join(reservedLabels, ", "))
		case value == "":
			return fail("--metrics-label %s: the value is empty", name)
		}
		if _, dup := labels[name]; dup {
			return fail("--metrics-label %s is given twice", name)
		}
		labels[name] = value
	}
	r := &runMetrics{a: a, f: *f, file: filepath.Base(file),
		m: metrics.New(metrics.Options{Version: version.Version, Labels: labels})}
	if f.pushgateway != "" {
		target, err := metrics.PushTarget(f.pushgateway)
		if err != nil {
			return fail("--pushgateway: %v", err)
		}
		r.push = target
	}
	if f.textfile != "" {
		dir := filepath.Dir(f.textfile)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fail("--metrics-textfile %s: the directory %s is not there; node_exporter's --collector.textfile.directory is the place", f.textfile, dir)
		}
		if !strings.HasSuffix(f.textfile, ".prom") {
			a.log.Warn(fmt.Sprintf("--metrics-textfile %s: node_exporter's textfile collector reads only files named *.prom", f.textfile))
		}
	}
	if f.addr != "" {
		srv, err := r.m.Listen(f.addr)
		if err != nil {
			return fail("--metrics-addr %s: %v", f.addr, err)
		}
		r.srv = srv
		// In text, said whatever the log level: with port 0, this is the
		// only way to learn the port.
		if a.logf.format == "json" {
			a.log.Info("serving metrics while the run goes on", "url", srv.URL())
		} else {
			fmt.Fprintf(a.stderr, "Serving metrics on %s while the run goes on\n", srv.URL())
		}
	}
	return r, nil
}

// begin records that a pipeline starts.
func (r *runMetrics) begin(p *plan.Pipeline) {
	if r != nil {
		r.m.Begin(p.Name, p.Budget())
	}
}

// progress returns p with the metrics watching the run too.
func (r *runMetrics) progress(p runner.Progress) runner.Progress {
	switch {
	case r == nil:
		return p
	case p == nil:
		return r.m
	}
	return progresses{p, r.m}
}

// retried counts a retry a plugin logged for endpoint.
func (r *runMetrics) retried(pipeline, endpoint string) {
	if r != nil {
		r.m.Retried(pipeline, endpoint)
	}
}

// finish records how a pipeline ended.
func (r *runMetrics) finish(p *plan.Pipeline, rep *runner.Report, err error) {
	if r != nil {
		r.m.Finish(p.Name, rep, err)
	}
}

// verified records what pipe verify found in pipeline's store.
func (r *runMetrics) verified(pipeline string, rep *runner.VerifyReport, err error) {
	if r == nil || rep == nil {
		return
	}
	r.m.Verified(pipeline, rep.Started, rep.Finished, len(rep.Runs), rep.Objects, rep.Bad, rep.Bytes, err == nil && rep.OK())
}

// drilled records what pipe drill found.
func (r *runMetrics) drilled(rep *drillReport) {
	if r == nil {
		return
	}
	failed := 0
	for _, c := range rep.Checks {
		if !c.OK {
			failed++
		}
	}
	ended := time.Now()
	started := ended.Add(-time.Duration((rep.RestoreSeconds + rep.CheckSeconds) * float64(time.Second)))
	r.m.Drilled(rep.Pipeline, started, started.Add(time.Duration(rep.RestoreSeconds*float64(time.Second))), ended, len(rep.Checks), failed, rep.OK)
}

// close writes the textfile, pushes and stops serving. Neither a textfile
// nor a push that fails changes the run's outcome: each is a warning.
func (r *runMetrics) close() {
	if r == nil {
		return
	}
	if r.f.textfile != "" {
		if err := r.m.WriteTextfile(r.f.textfile); err != nil {
			r.a.log.Warn(fmt.Sprintf("--metrics-textfile: the metrics were not written: %v", err))
		}
	}
	if r.f.pushgateway != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := r.m.Push(ctx, r.f.pushgateway, map[string]string{"file": r.file})
		cancel()
		if err != nil {
			r.a.log.Warn(fmt.Sprintf("--pushgateway: the metrics were not pushed to %s: %v", r.push, err))
		} else {
			r.a.log.Info("metrics pushed", "pushgateway", r.push, "job", metrics.Job, "file", r.file)
		}
	}
	if r.srv != nil {
		r.srv.Close()
	}
}

// progresses shows a run to several Progress at once.
type progresses []runner.Progress

func (ps progresses) Start(pipeline string, total int64, r *engine.Run) {
	for _, p := range ps {
		p.Start(pipeline, total, r)
	}
}

func (ps progresses) Stop() {
	for _, p := range ps {
		p.Stop()
	}
}

// walPushed records a file pipe wal push archived.
func (r *runMetrics) walPushed(archive string, p *wal.PushResult) {
	if r != nil {
		r.m.WALPushed(archive, p)
	}
}

// walBacklog records the files waiting for the background pusher.
func (r *runMetrics) walBacklog(archive string, waiting int, exceeded bool) {
	if r != nil {
		r.m.WALBacklog(archive, waiting, exceeded)
	}
}

// walFetched records a file pipe wal fetch restored (from "store" or
// "spool"), or a failed attempt (from "").
func (r *runMetrics) walFetched(archive, from string) {
	if r != nil {
		r.m.WALFetched(archive, from)
	}
}

// walChecked records what pipe wal list or verify found.
func (r *runMetrics) walChecked(archive string, l *wal.Listing, rep *wal.VerifyReport, ok bool) {
	if r != nil {
		r.m.WALChecked(archive, l, rep, ok)
	}
}

// binlogArchiving registers a running binlog archiver.
func (r *runMetrics) binlogArchiving(archive string, a *binlog.Archiver) {
	if r != nil {
		r.m.BinlogArchiving(archive, func() metrics.BinlogArchiver {
			return metrics.BinlogArchiver{Lag: time.Duration(a.LagNanos.Load()), Bytes: a.Stored.Load(), Segments: a.Segments.Load(), Gaps: a.Gaps.Load()}
		})
	}
}
