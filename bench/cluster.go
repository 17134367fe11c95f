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

// clusterRaces runs the backups, then the restores, interleaved.
func (b *bench) clusterRaces(ctx context.Context, m *minio, c clusterRace) (backup, restore *race, err error) {
	mc := b.cfg.mc
	loop := func(text string) runFunc { return script(text, c.loopEnv) }
	pipe := func(file string) runFunc { return b.pipeRun(file, -1, c.pipeEnv...) }
	check := func(ctx context.Context, rep int) error { return c.check(ctx) }
	backup = &race{name: fmt.Sprintf("backup of %s (%s) to MinIO", c.what, mib(c.bytes)), bytes: c.bytes,
		pipe: &contender{label: clusterPipeLabel, clean: m.emptier(ctx, mc, c.pipePrefix), run: pipe(c.backupFile)},
		refs: []*contender{{label: c.backupLabel, clean: m.emptier(ctx, mc, c.loopPrefix), run: loop(c.backupLoop)}}}
	if c.jobsBackupFile != "" {
		backup.refs = append(backup.refs, &contender{label: clusterJobsLabel, clean: m.emptier(ctx, mc, c.jobsPrefix), run: pipe(c.jobsBackupFile)})
	}
	if err := backup.run(ctx, b.cfg.reps); err != nil {
		return nil, nil, err
	}
	restore = &race{name: fmt.Sprintf("restore of the %s from MinIO", c.what), bytes: c.bytes,
		pipe: &contender{label: clusterPipeLabel, clean: c.drop, run: pipe(c.restoreFile), check: check},
		refs: []*contender{{label: c.restoreLabel, clean: c.drop, run: loop(c.restoreLoop), check: check}}}
	if c.jobsRestoreFile != "" {
		restore.refs = append(restore.refs, &contender{label: clusterJobsLabel, clean: c.drop, run: pipe(c.jobsRestoreFile), check: check})
	}
	if err := restore.run(ctx, b.cfg.reps); err != nil {
		return nil, nil, err
	}
	return backup, restore, nil
}

// clusterMarkdown writes a cluster scenario's table (pipe against the
// loop, both directions) and the CPU each used.
func clusterMarkdown(w writer, backup, restore *race) {
	w.table("direction", "the loop", "pipe", "pipe / loop (time)", "target", "met?")
	for _, d := range []namedRace{{"backup", backup}, {"restore", restore}} {
		ref := d.race.refs[0].median()
		row := func(name string, c *contender) {
			p := c.median()
			ratio := timeRatio(p, ref)
			w("| %s | %s | %s | %.2f× | ≤ 0.80× | %s |\n", name, ref.Round(10*time.Millisecond), p.Round(10*time.Millisecond), ratio, yesNo(ratio <= 0.8))
		}
		row(d.name, d.race.pipe)
		if len(d.race.refs) > 1 {
			row(d.name+", table by table (jobs = 2)", d.race.refs[1])
		}
	}
	cpuPerRun(w, []namedRace{{backup.name, backup}, {restore.name, restore}})
}
