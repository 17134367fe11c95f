package main

import (
	"context"
	"fmt"
	"time"
)

// clusterRace is what the cluster scenarios (a whole PostgreSQL or
// MariaDB server) measure: pipe's backup and restore files against the
// loop people script, in both directions. Each restore goes into a server
// without the databases (drop, untimed) and is then checked (check).
type clusterRace struct {
	what                    string // the databases, as the scenarios' names say them
	bytes                   int64
	pipeEnv, loopEnv        []string
	backupFile, restoreFile string
	// The loops' bash scripts and labels.
	backupLoop, backupLabel   string
	restoreLoop, restoreLabel string
	// Where pipe and the loop keep their objects in the bench bucket.
	pipePrefix, loopPrefix string
	drop                   func()
	check                  func(ctx context.Context) error
	// A second pipe, table by table (jobs), if the scenario has one: its
	// files, and where it keeps its objects. It runs as one more
	// reference (refs[1]), so the loop stays refs[0].
	jobsBackupFile, jobsRestoreFile, jobsPrefix string
}

const clusterJobsLabel = `pipe, databases = ["*"], 2 at once, jobs = 2`

const clusterPipeLabel = `pipe, databases = ["*"], 2 at once`

// race runs the backups, then the restores, interleaved.
func (b *bench) race(ctx context.Context, m *minio, mc string, c clusterRace) (backup, restore *scenarioResult, err error) {
	loop := func(script string) func(ctx context.Context, rep int) (measurement, error) {
		return func(ctx context.Context, rep int) (measurement, error) {
			return timeCommand(ctx, []string{"bash", "-o", "pipefail", "-c", script}, c.loopEnv...)
		}
	}
	pipe := func(file string) func(ctx context.Context, rep int) (measurement, error) {
		return func(ctx context.Context, rep int) (measurement, error) {
			r, err := runPipe(ctx, b.cfg.pipe, file, -1, c.pipeEnv...)
			return r.measurement, err
		}
	}
	checked := func(run func(ctx context.Context, rep int) (measurement, error)) func(ctx context.Context, rep int) (measurement, error) {
		return func(ctx context.Context, rep int) (measurement, error) {
			m, err := run(ctx, rep)
			if err == nil {
				err = c.check(ctx)
			}
			return m, err
		}
	}
	backup = &scenarioResult{name: fmt.Sprintf("backup of %s (%s) to MinIO", c.what, mib(c.bytes)), bytes: c.bytes,
		pipe: &contender{label: clusterPipeLabel, clean: m.emptier(ctx, mc, c.pipePrefix), run: pipe(c.backupFile)},
		refs: []*contender{{label: c.backupLabel, clean: m.emptier(ctx, mc, c.loopPrefix), run: loop(c.backupLoop)}}}
	if c.jobsBackupFile != "" {
		backup.refs = append(backup.refs, &contender{label: clusterJobsLabel, clean: m.emptier(ctx, mc, c.jobsPrefix), run: pipe(c.jobsBackupFile)})
	}
	if err := backup.interleave(ctx, b.cfg.reps); err != nil {
		return nil, nil, err
	}
	restore = &scenarioResult{name: fmt.Sprintf("restore of the %s from MinIO", c.what), bytes: c.bytes,
		pipe: &contender{label: clusterPipeLabel, clean: c.drop, run: checked(pipe(c.restoreFile))},
		refs: []*contender{{label: c.restoreLabel, clean: c.drop, run: checked(loop(c.restoreLoop))}}}
	if c.jobsRestoreFile != "" {
		restore.refs = append(restore.refs, &contender{label: clusterJobsLabel, clean: c.drop, run: checked(pipe(c.jobsRestoreFile))})
	}
	if err := restore.interleave(ctx, b.cfg.reps); err != nil {
		return nil, nil, err
	}
	return backup, restore, nil
}

// clusterMarkdown writes a cluster scenario's table (pipe against the
// loop, both directions) and the CPU each used.
func clusterMarkdown(w func(string, ...any), backup, restore *scenarioResult) {
	w("| direction | the loop | pipe | pipe / loop (time) | target | met? |\n|---|---|---|---|---|---|\n")
	for _, d := range []struct {
		name string
		s    *scenarioResult
	}{{"backup", backup}, {"restore", restore}} {
		ref := median(d.s.refs[0].times)
		row := func(name string, c *contender) {
			p := median(c.times)
			ratio := float64(p) / float64(ref)
			w("| %s | %s | %s | %.2f× | ≤ 0.80× | %s |\n", name, ref.Round(10*time.Millisecond), p.Round(10*time.Millisecond), ratio, yesNo(ratio <= 0.8))
		}
		row(d.name, d.s.pipe)
		if len(d.s.refs) > 1 {
			row(d.name+", table by table (jobs = 2)", d.s.refs[1])
		}
	}
	w("\nCPU seconds per run (user + system of the client processes; the server's work is not counted): ")
	for _, s := range []*scenarioResult{backup, restore} {
		for _, c := range append([]*contender{s.pipe}, s.refs...) {
			w("%s %s %.1f s; ", s.name, c.label, median(c.cpu).Seconds())
		}
	}
	w("\n")
}
