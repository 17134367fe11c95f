package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/drill"
	"github.com/pipebackup/pipe/notify"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/runner"
	"github.com/pipebackup/pipe/wal/walname"
)

type drillFlags struct {
	load    loadFlags
	metrics metricsFlags
	drill   string
	runID   string
	before  string
	keep    bool
	docker  string
	scratch string
}

func (a *app) drillCmd() *cobra.Command {
	var f drillFlags
	cmd := &cobra.Command{
		Use:   "drill FILE.hcl",
		Short: "Prove a backup restores: restore a run into a scratch server and run the file's checks",
		Long: `drill restores the newest run (or --run, --before) through a drill block's
restore pipeline into a scratch database server, a container of the
drill's image on a free local port, runs the drill's checks (queries and
their expected results, pg_amcheck), reports how long the restore and the
checks took, and removes the server. A base backup (a postgres_basebackup
sink) is restored into a scratch folder with the archived WAL since its
start, and a container of the image recovers it to the end of the archive
before the checks (--keep leaves it running and says how
to connect). The file's notify targets get drill_success or
drill_failure; the metrics flags export pipe_drill_*.

Exit code 0 when the restore and every check passed; 1 when one failed;
2 for an invalid file or flags; 130 when interrupted.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.drill(cmd, args[0], &f)
		},
	}
	f.load.register(cmd, false, true, true)
	f.metrics.register(cmd)
	cmd.Flags().StringVar(&f.drill, "drill", "", "the drill block to run (default: the file's only one)")
	cmd.Flags().StringVar(&f.runID, "run", "", "restore this run (its id, as pipe backups lists it)")
	cmd.Flags().StringVar(&f.before, "before", "", "restore the newest run that finished before this time")
	cmd.Flags().BoolVar(&f.keep, "keep", false, "leave the scratch server running (docker rm -f removes it)")
	cmd.Flags().StringVar(&f.docker, "docker", "docker", "the docker CLI")
	cmd.Flags().StringVar(&f.scratch, "scratch-dir", "", "base backups: where the scratch data directory and WAL go (default: the system's temporary folder)")
	return cmd
}

// drillReport is what pipe drill found.
type drillReport struct {
	Drill          string          `json:"drill"`
	Pipeline       string          `json:"pipeline"`
	Image          string          `json:"image"`
	RunID          string          `json:"run_id,omitempty"`
	OK             bool            `json:"ok"`
	Error          string          `json:"error,omitempty"`
	RestoreSeconds float64         `json:"restore_seconds"`
	CheckSeconds   float64         `json:"check_seconds"`
	Checks         []drill.Result  `json:"checks"`
	Restore        *runSummary     `json:"restore,omitempty"`
	Server         *drillServerRef `json:"scratch_server,omitempty"`
}

// drillServerRef says where a kept scratch server is.
type drillServerRef struct {
	Container string `json:"container"`
	Address   string `json:"address"`
	User      string `json:"user"`
}

// drill is pipe drill.
func (a *app) drill(cmd *cobra.Command, path string, f *drillFlags) error {
	sel, err := a.selection(&runFlags{runID: f.runID, before: f.before, progress: "never"})
	if err != nil {
		return err
	}
	runID := newRunID(time.Now())
	p, err := a.load(path, &f.load, runID)
	if err != nil {
		return err
	}
	d, pp, err := chooseDrill(p, f.drill)
	if err != nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return &exitError{exitInvalid}
	}
	mx, err := a.startMetrics(&f.metrics, path)
	if err != nil {
		return err
	}
	defer mx.close()
	ctx, stop := interruptible(cmd)
	defer stop()
	secrets := p.File.Secrets()
	note := a.notifier(p.File, secrets)
	defer note.Close()

	rep := a.runDrill(ctx, p, d, pp, f, runner.Options{RunID: runID, Registry: a.registry, Select: sel,
		Warn:  func(msg string) { a.log.Warn(msg, "drill", d.Name) },
		Scrub: func(msg string) string { return scrub(msg, secrets) }}, secrets)
	mx.drilled(rep)
	ev := notify.Event{Kind: notify.DrillSuccess, File: p.File.Path, Pipeline: pp.Name, RunID: rep.RunID, OK: rep.OK, Error: rep.Error, Summary: rep}
	if !rep.OK {
		ev.Kind = notify.DrillFailure
	}
	note.Send(ev)
	return a.drillEnded(ctx, f, rep)
}

// chooseDrill returns the drill --drill names (or the file's only one)
// and its restore pipeline.
func chooseDrill(p *plan.Plan, name string) (*pipefile.Drill, *plan.Pipeline, error) {
	ds := p.File.Drills
	var d *pipefile.Drill
	switch {
	case len(ds) == 0:
		return nil, nil, fmt.Errorf("%s has no drill block: add drill \"name\" { pipeline = \"…\" image = \"postgres:15\" check \"…\" { query = \"…\" } }", p.File.Path)
	case name == "" && len(ds) > 1:
		return nil, nil, fmt.Errorf("%s has %d drills: choose one with --drill", p.File.Path, len(ds))
	case name == "":
		d = ds[0]
	default:
		for _, c := range ds {
			if c.Name == name {
				d = c
			}
		}
		if d == nil {
			return nil, nil, fmt.Errorf("--drill %s: %s has no such drill", name, p.File.Path)
		}
	}
	pp := pipelineNamed(p, d.Pipeline)
	if pp == nil {
		return nil, nil, fmt.Errorf("drill %q: pipeline %q was not loaded (leave it out of --pipeline's list, or name it)", d.Name, d.Pipeline)
	}
	return d, pp, nil
}

// runDrill starts the scratch server, restores through pp into it, runs
// the checks and removes the server (unless --keep).
func (a *app) runDrill(ctx context.Context, p *plan.Plan, d *pipefile.Drill, pp *plan.Pipeline, f *drillFlags, o runner.Options, secrets []string) *drillReport {
	rep := &drillReport{Drill: d.Name, Pipeline: pp.Name, Image: d.Image, Checks: []drill.Result{}}
	ctx, cancel := context.WithTimeoutCause(ctx, d.Timeout, fmt.Errorf("the drill ran longer than its timeout (%s)", d.Timeout))
	defer cancel()
	fail := func(err error) *drillReport {
		if cause := context.Cause(ctx); ctx.Err() != nil && cause != nil && !errors.Is(err, cause) {
			err = fmt.Errorf("%w (%v)", err, cause)
		}
		rep.Error = scrub(err.Error(), secrets)
		return rep
	}
	start := time.Now()
	sink := pp.Sinks[0]
	if sink.Type == drill.BaseBackupSink {
		return a.runBaseDrill(ctx, p.WALArchive(pp), d, pp, f, o, secrets, rep, fail)
	}
	srv, err := drill.Start(ctx, sink.Type, d.Image, drill.Options{Docker: f.docker, Run: a.programOutput(secrets)})
	if err != nil {
		return fail(err)
	}
	if f.keep {
		rep.Server = &drillServerRef{Container: srv.Name, Address: fmt.Sprintf("127.0.0.1:%d", srv.Port), User: srv.Kind.User}
	} else {
		defer func() {
			if err := srv.Close(); err != nil {
				a.log.Warn("removing the scratch server: "+err.Error()+"; docker rm -f "+srv.Name+" removes it", "drill", d.Name)
			}
		}()
	}
	a.log.Info("scratch server started", "drill", d.Name, "image", d.Image, "container", srv.Name, "port", srv.Port)
	srv.Connect(sink.Values)
	res, err := runner.Run(ctx, pp, o)
	s := summarize(pp, res, err, secrets)
	rep.Restore, rep.RestoreSeconds = &s, time.Since(start).Seconds()
	if res != nil {
		rep.RunID, _, _ = catalog.RunTime(res.ManifestRead) // the manifest restored names the run
	}
	if err != nil {
		return fail(fmt.Errorf("the restore failed: %w", err))
	}
	a.checkDrill(ctx, d, srv, sink.String("database"), rep)
	return rep
}

// checkDrill runs the drill's checks on srv and says in rep whether all
// passed.
func (a *app) checkDrill(ctx context.Context, d *pipefile.Drill, srv *drill.Server, database string, rep *drillReport) {
	checked := time.Now()
	rep.Checks = runChecks(ctx, d, srv, database)
	rep.CheckSeconds = time.Since(checked).Seconds()
	var bad []string
	for _, c := range rep.Checks {
		if !c.OK {
			bad = append(bad, c.Check)
		}
	}
	rep.OK = len(bad) == 0
	if !rep.OK {
		rep.Error = fmt.Sprintf("checks failed: %s", strings.Join(bad, ", "))
	}
}

// runBaseDrill drills a base backup: the restore into a scratch folder,
// the WAL archived since the backup's start beside it, a container of the
// drill's image recovering the data directory to the end of that WAL, then
// the checks.
func (a *app) runBaseDrill(ctx context.Context, pa *plan.Archive, d *pipefile.Drill, pp *plan.Pipeline, f *drillFlags, o runner.Options, secrets []string, rep *drillReport, fail func(error) *drillReport) *drillReport {
	start := time.Now()
	if pa == nil {
		return fail(fmt.Errorf("pipeline %q restores base backups, and the file names no archive block whose WAL they recover from (wal_archive)", pp.Name))
	}
	sc, err := drill.NewScratch(f.scratch)
	if err != nil {
		return fail(err)
	}
	opts := drill.Options{Docker: f.docker, Run: a.programOutput(secrets), Wait: d.Timeout}
	sc.Connect(pp.Sinks[0].Values)
	res, err := runner.Run(ctx, pp, o)
	s := summarize(pp, res, err, secrets)
	rep.Restore = &s
	if res != nil {
		rep.RunID, _, _ = catalog.RunTime(res.ManifestRead)
	}
	if err != nil {
		sc.Discard()
		return fail(fmt.Errorf("the restore failed: %w", err))
	}
	n, err := a.fetchDrillWAL(ctx, pa, sc)
	if err != nil {
		sc.Discard()
		return fail(fmt.Errorf("fetching the WAL to recover: %w", err))
	}
	a.log.Info("WAL fetched for the drill", "drill", d.Name, "files", n)
	user := d.User
	if user == "" {
		user = "postgres"
	}
	srv, err := drill.StartRecovered(ctx, sc, d.Image, user, opts) // removes sc when it fails
	if err != nil {
		return fail(err)
	}
	rep.RestoreSeconds = time.Since(start).Seconds()
	if f.keep {
		rep.Server = &drillServerRef{Container: srv.Name, Address: "the Unix socket in the container (docker exec -u postgres " + srv.Name + " psql)", User: user}
	} else {
		defer func() {
			if err := srv.Close(); err != nil {
				a.log.Warn("removing the scratch server: "+err.Error()+"; docker rm -f "+srv.Name+" and rm -rf "+sc.Dir+" remove it", "drill", d.Name)
			}
		}()
	}
	a.checkDrill(ctx, d, srv, "postgres", rep)
	return rep
}

// fetchDrillWAL brings the archived WAL the restored base backup needs
// into the scratch folder: every history file and every segment of its
// cluster from the backup's start on, on any timeline.
func (a *app) fetchDrillWAL(ctx context.Context, pa *plan.Archive, sc *drill.Scratch) (int, error) {
	first, err := sc.StartSegment()
	if err != nil {
		return 0, err
	}
	ar, done, err := runner.OpenArchive(ctx, pa, a.registry, sc.Data)
	if err != nil {
		return 0, err
	}
	defer done()
	id, err := ar.FetchSystemID(ctx)
	if err != nil {
		return 0, err
	}
	l, err := ar.List(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	fetched := map[string]bool{} // a file may have several objects: fetch picks one
	for _, e := range l.Entries {
		if e.SystemID != id || fetched[e.Name] || (e.Kind != walname.History && (e.Kind != walname.Segment || e.Name[8:] < first[8:])) {
			continue
		}
		fetched[e.Name] = true
		dest := filepath.Join(sc.WAL, e.Name)
		if err := ar.Fetch(ctx, e.Name, dest); err != nil {
			return n, fmt.Errorf("%s: %w", e.Name, err)
		}
		if err := os.Chmod(dest, 0o644); err != nil { // the server's user reads it
			return n, err
		}
		n++
	}
	return n, nil
}

// runChecks runs the drill's checks (their database defaulting to the
// sink's), then pg_amcheck when asked.
func runChecks(ctx context.Context, d *pipefile.Drill, srv *drill.Server, database string) []drill.Result {
	out := []drill.Result{}
	for _, c := range d.Checks {
		c := *c
		if c.Database == "" {
			c.Database = database
		}
		if c.Database == "" && srv.Kind.Sink == "postgres" {
			c.Database = "postgres"
		}
		out = append(out, c.Run(ctx, srv))
	}
	if d.Amcheck {
		start := time.Now()
		r := drill.Result{Check: "amcheck", OK: true}
		if msg, err := srv.Amcheck(ctx); err != nil {
			r.OK, r.Error = false, err.Error()
		} else if strings.TrimSpace(msg) != "" {
			r.OK, r.Got = false, strings.TrimSpace(msg) // pg_amcheck prints what it found corrupt
		}
		r.Seconds = time.Since(start).Seconds()
		out = append(out, r)
	}
	return out
}

// programOutput runs a program of pipe's own and returns its standard
// output.
func (a *app) programOutput(secrets []string) drill.Runner {
	return func(ctx context.Context, argv []string) (string, error) {
		var b strings.Builder
		err := a.registry.RunProgram(ctx, host.Program{Argv: argv, Secrets: secrets, Stdout: &b})
		return b.String(), err
	}
}

// drillEnded prints what the drill found and returns the exit code's
// error.
func (a *app) drillEnded(ctx context.Context, f *drillFlags, rep *drillReport) error {
	if f.load.json {
		if err := writeJSON(a.stdout, rep); err != nil {
			return err
		}
	} else {
		printDrill(a, rep)
	}
	switch {
	case ctx.Err() != nil && interrupted(ctx):
		return &exitError{exitInterrupted}
	case !rep.OK:
		return &exitError{exitFailed}
	}
	return nil
}

func printDrill(a *app, rep *drillReport) {
	status := "passed"
	if !rep.OK {
		status = "FAILED"
	}
	run := rep.RunID
	if run == "" {
		run = "-"
	}
	fmt.Fprintf(a.stderr, "drill %q · pipeline %q · %s · %s\n", rep.Drill, rep.Pipeline, rep.Image, status)
	fmt.Fprintf(a.stderr, "  restore   %s in %.1fs\n", run, rep.RestoreSeconds)
	for _, c := range rep.Checks {
		mark := "ok"
		if !c.OK {
			mark = "FAILED"
		}
		detail := c.Got
		if c.Error != "" {
			detail = c.Error
		} else if c.Want != "" && !c.OK {
			detail = fmt.Sprintf("got %q, want %s", c.Got, c.Want)
		}
		fmt.Fprintf(a.stderr, "  check     %-20s %-6s %.2fs  %s\n", c.Check, mark, c.Seconds, oneLineText(detail))
	}
	if rep.Server != nil {
		fmt.Fprintf(a.stderr, "  kept      the scratch server %s at %s (user %s); docker rm -f %s removes it\n", rep.Server.Container, rep.Server.Address, rep.Server.User, rep.Server.Container)
	}
	if rep.Error != "" {
		fmt.Fprintln(a.stderr, "Error:", rep.Error)
	}
}

// oneLineText keeps a result on one line.
func oneLineText(s string) string {
	s = strings.ReplaceAll(s, "\n", " ⏎ ")
	if len(s) > 120 {
		s = s[:120] + "…"
	}
	return s
}
