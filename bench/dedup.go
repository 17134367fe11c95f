package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// The deduplicated runs scenario (issue: deduplicated runs): pgbench -i
// in PostgreSQL 15, and each night its plain pg_dump (uncompressed, so
// chunks can match) written to a file, then backed up from that file by
// pipe with a dedup stage, by pipe without one (zstd 3 and age, one
// compressed full a night), and by restic backup --stdin (its defaults:
// compression auto, AES; a repository on the same disk) and again with
// --compression max, as an operator tuning restic for size would. Between nights
// 2% of pgbench_accounts is updated: in one key range (seven nights), then
// in a fresh store scattered over the table, aid % 50 = night (four
// nights). Then the newest night is restored by each. Every tool reads
// the same file and writes to the same disk. Base backups are
// dedupbase.go's.

type dedupResult struct {
	scale    int
	variants []*dedupVariant
	versions []string
	notes    []string
}

// dedupVariant is one series of nights.
type dedupVariant struct {
	name     string
	nights   int
	dumpSize int64
	backup   *race
	restore  *race
	// stored is each tool's store size after each night.
	stored map[string][]int64
	// budget and peak are pipe's memory budget and largest peak RSS, of
	// the dedup backups.
	budget, peak int64
	runs         []pipelineRun
}

var dedupTools = []string{"pipe, dedup", "pipe, no dedup (zstd 3, age)", "restic backup --stdin", "restic backup --stdin --compression max"}

// dedupStores are the tools' stores, in dedupTools' order.
var dedupStores = []string{"pipe-dd", "pipe-plain", "restic", "restic-max"}

type dedupBench struct {
	b     *bench
	pg    *pgServer
	dir   string
	scale int
	v     *dedupVariant
	night int
	// change makes night n's changes.
	change func(ctx context.Context, n int) error
}

func (b *bench) dedupScenario(ctx context.Context) (*dedupResult, error) {
	scale, clustered, scattered := 100, 7, 4
	if b.cfg.quick {
		scale, clustered, scattered = 5, 3, 2
	}
	if _, err := exec.LookPath("restic"); err != nil {
		return nil, fmt.Errorf("restic is not installed (apt-get install restic): %w", err)
	}
	logf("scenario: deduplicated runs, pgbench scale %d dumped each night: pipe with and without dedup vs restic, %d nights of 2%% changed in one range, %d scattered", scale, clustered, scattered)
	dir, err := os.MkdirTemp(b.cfg.workDir, "pipe-bench-dedup-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pg, err := startPG(ctx)
	if err != nil {
		return nil, err
	}
	defer pg.stop()
	pg.direct(ctx)
	db := &dedupBench{b: b, pg: pg, dir: dir, scale: scale}
	if err := db.keys(ctx); err != nil {
		return nil, err
	}
	res := &dedupResult{scale: scale}
	rows := int64(scale) * 100000
	for _, v := range []struct {
		name   string
		nights int
		sql    func(n int) string
	}{
		{"2% in one key range", clustered, func(n int) string {
			return fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid BETWEEN %d AND %d", n, 1+int64(n-2)*rows/50, int64(n-1)*rows/50)
		}},
		{"2% scattered (aid % 50 = night)", scattered, func(n int) string {
			return fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid %% 50 = %d", n, n)
		}},
	} {
		db.v = &dedupVariant{name: v.name, nights: v.nights, stored: map[string][]int64{}}
		sql := v.sql
		db.change = func(ctx context.Context, n int) error { return db.psql(ctx, sql(n)) }
		if err := db.series(ctx); err != nil {
			return nil, err
		}
		res.variants = append(res.variants, db.v)
	}
	res.versions = toolVersions(ctx, []string{"restic", "version"}, []string{"pg_dump", "--version"})
	return res, nil
}

// keys writes the age key pair, the dedup key and restic's password.
func (db *dedupBench) keys(ctx context.Context) error {
	for _, args := range [][]string{{"keygen", "-o", "keys/backup"}, {"keygen", "--dedup"}} {
		if _, err := runCommandIn(ctx, db.dir, append([]string{db.b.cfg.pipe}, args...), false); err != nil {
			return fmt.Errorf("pipe %s: %w", strings.Join(args, " "), err)
		}
	}
	return os.WriteFile(filepath.Join(db.dir, "restic.pw"), []byte("bench-restic-secret-42\n"), 0o600)
}

func (db *dedupBench) psql(ctx context.Context, sql string) error {
	_, err := db.query(ctx, sql)
	return err
}

// query runs sql in the database and returns its output, unaligned and
// without headers.
func (db *dedupBench) query(ctx context.Context, sql string) (string, error) {
	m, err := timeCommand(ctx, []string{"psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", db.pg.url(pgDB), "-c", sql}, pgEnvVars...)
	if err != nil {
		return "", fmt.Errorf("psql %q: %w", sql, err)
	}
	return strings.TrimSpace(string(m.stdout)), nil
}

// series runs one variant: a fresh database and fresh stores, the
// nights, then the restores.
func (db *dedupBench) series(ctx context.Context) error {
	v := db.v
	for _, d := range append(dedupStores, "out") {
		os.RemoveAll(filepath.Join(db.dir, d))
	}
	if err := db.psql(ctx, "DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history"); err != nil {
		return err
	}
	if _, err := timeCommand(ctx, []string{"pgbench", "-i", "-q", "-s", strconv.Itoa(db.scale), db.pg.url(pgDB)}, pgEnvVars...); err != nil {
		return fmt.Errorf("pgbench -i: %w", err)
	}
	if _, err := db.sh(ctx, "restic -r restic --password-file restic.pw init && restic -r restic-max --password-file restic.pw init"); err != nil {
		return err
	}
	files := map[string]string{"p.hcl": dedupPipelines}
	for k, text := range dedupBackups {
		files[k] = text
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(db.dir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	budget, err := planBudgetIn(ctx, db.dir, db.b.cfg.pipe, "dd.hcl")
	if err != nil {
		return err
	}
	v.budget = budget
	db.night = 0
	backup := &race{name: fmt.Sprintf("backup of one night's dump, %s", v.name), noWarmup: true}
	for i, label := range dedupTools {
		c := &contender{label: label, run: db.backupRun(i)}
		if i == 0 {
			c.clean = func() {
				if err := db.nextNight(ctx); err != nil {
					logf("dedup: night %d: %v", db.night, err)
				}
			}
			backup.pipe = c
		} else {
			backup.refs = append(backup.refs, c)
		}
	}
	if err := backup.run(ctx, v.nights); err != nil {
		return err
	}
	backup.bytes = v.dumpSize
	v.backup = backup

	restore := &race{name: fmt.Sprintf("restore of the newest night, %s", v.name), bytes: v.dumpSize, noWarmup: true}
	out := filepath.Join(db.dir, "out")
	restore.pipe = &contender{label: "pipe, dedup", clean: removing(out), run: db.restoreRun("restore-dd"), check: sameAs(filepath.Join(out, "dump.sql"), filepath.Join(db.dir, "dump.sql"), v.dumpSize)}
	restore.refs = []*contender{
		{label: "restic dump, then sync", clean: removing(out), run: db.script("mkdir -p out && restic -r restic --password-file restic.pw dump latest dump.sql > out/dump.sql && sync out/dump.sql"),
			check: sameAs(filepath.Join(out, "dump.sql"), filepath.Join(db.dir, "dump.sql"), v.dumpSize)},
		{label: "pipe, no dedup", clean: removing(out), run: db.restoreRun("restore-plain"), check: sizeIs(filepath.Join(out, "dump.sql"), v.dumpSize)},
	}
	if err := restore.run(ctx, max(1, min(db.b.cfg.reps, 3))); err != nil {
		return err
	}
	v.restore = restore
	return nil
}

// nextNight makes the next night's changes (from the second night on) and
// dumps the database to dump.sql.
func (db *dedupBench) nextNight(ctx context.Context) error {
	db.night++
	if db.night > 1 {
		if err := db.change(ctx, db.night); err != nil {
			return err
		}
	}
	path := filepath.Join(db.dir, "dump.sql")
	if _, err := timeCommand(ctx, []string{"pg_dump", "-Fp", "-f", path, db.pg.url(pgDB)}, pgEnvVars...); err != nil {
		return fmt.Errorf("pg_dump: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	db.v.dumpSize = fi.Size()
	return nil
}

func (db *dedupBench) sh(ctx context.Context, text string) (measurement, error) {
	return runCommandIn(ctx, db.dir, []string{"bash", "-o", "pipefail", "-c", text}, false)
}

func (db *dedupBench) script(text string) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) { return db.sh(ctx, text) }
}

// backupRun is tool i's backup of the night's dump; the store's size
// after it goes to stored.
func (db *dedupBench) backupRun(i int) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		var m measurement
		var err error
		switch i {
		case 0, 1:
			file := []string{"dd.hcl", "plain.hcl"}[i]
			m, err = runCommandIn(ctx, db.dir, []string{db.b.cfg.pipe, "run", file, "--json", "--progress", "never"}, false)
			if err == nil && i == 0 {
				var s runSummary
				if json.Unmarshal(m.stdout, &s) == nil && len(s.Pipelines) == 1 {
					db.v.runs = append(db.v.runs, s.Pipelines[0])
				}
				db.v.peak = max(db.v.peak, m.maxRSS)
			}
		case 2, 3:
			m, err = db.sh(ctx, fmt.Sprintf("restic -r %s --password-file restic.pw backup --quiet --stdin --stdin-filename dump.sql%s < dump.sql",
				dedupStores[i], map[bool]string{true: " --compression max"}[i == 3]))
		}
		if err != nil {
			return m, err
		}
		label := dedupTools[i]
		n, err := duBytes(filepath.Join(db.dir, dedupStores[i]))
		db.v.stored[label] = append(db.v.stored[label], n)
		return m, err
	}
}

// restoreRun restores the newest run with pipeline name of p.hcl.
func (db *dedupBench) restoreRun(name string) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		return runCommandIn(ctx, db.dir, []string{db.b.cfg.pipe, "run", "p.hcl", "--pipeline", name, "--progress", "never"}, false)
	}
}

// duBytes is the bytes the files under dir hold.
func duBytes(dir string) (int64, error) {
	var n int64
	err := filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return err
	})
	return n, err
}

// toolVersions is each command's first line of output.
func toolVersions(ctx context.Context, cmds ...[]string) []string {
	var out []string
	for _, c := range cmds {
		m, err := timeCommand(ctx, c)
		if err == nil {
			out = append(out, strings.TrimSpace(strings.SplitN(string(m.stdout), "\n", 2)[0]))
		}
	}
	return out
}

// dedupPipelines are the restores of p.hcl; dd.hcl and plain.hcl (the
// backups) are written beside it.
var dedupPipelines = `
pipeline "restore-dd" {
  source "fs" { path = "pipe-dd/" }
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "fs" { path = "out/" }
}
pipeline "restore-plain" {
  source "fs" { path = "pipe-plain/" }
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "fs" { path = "out/" }
}
`

// dedupBackups are the backup pipelines, a file each (one pipeline per
// file: pipe plan's budget is the file's).
var dedupBackups = map[string]string{
	"dd.hcl": `pipeline "dd" {
  source "fs" { path = "dump.sql" }
  dedup { key = file("keys/dedup.key") }
  compress {}
  encrypt { recipients = [file("keys/backup.pub")] }
  sink "fs" { path = "pipe-dd/${run.id}/" }
}
`,
	"plain.hcl": `pipeline "plain" {
  source "fs" { path = "dump.sql" }
  compress {}
  encrypt { recipients = [file("keys/backup.pub")] }
  sink "fs" { path = "pipe-plain/${run.id}/" }
}
`,
}

func (r *dedupResult) races() []*race {
	var out []*race
	for _, v := range r.variants {
		out = append(out, v.backup, v.restore)
	}
	return out
}

func (r *dedupResult) markdown(w writer) {
	w("\n## Deduplicated runs (pgbench dumps, night after night)\n\n")
	w("Tools: %s. pgbench scale %d, dumped each night by pg_dump -Fp into a file that every tool backs up: pipe with a dedup stage (1 MiB chunks, zstd 3, age), pipe without (zstd 3, age: a compressed full each night), restic backup --stdin at its defaults (compression auto) and at --compression max. All on the same local disk. Medians of the nights.\n",
		strings.Join(r.versions, "; "), r.scale)
	for _, v := range r.variants {
		v.markdown(w)
	}
	for _, n := range r.notes {
		w("\n- %s\n", n)
	}
}

func (v *dedupVariant) markdown(w writer) {
	w("\n### %s, %d nights (the dump %s)\n\n", v.name, v.nights, mib(v.dumpSize))
	w.table("what", "pipe", "reference", "pipe / reference", "target", "met?")
	dd, plain, restic := v.stored[dedupTools[0]], v.stored[dedupTools[1]], v.stored[dedupTools[2]]
	if len(dd) > 0 && len(plain) > 0 && len(restic) > 0 {
		last := len(dd) - 1
		full := plain[0]
		ratio := float64(dd[last]) / float64(full)
		target, ok := "≤ 1.50×", ratio <= 1.5
		if strings.Contains(v.name, "scattered") {
			target, ok = "", true
		}
		met := ""
		if target != "" {
			met = yesNo(ok)
		}
		w("| stored after %d nights vs one compressed full | %s | %s | %.2f× | %s | %s |\n", len(dd), mib(dd[last]), mib(full), ratio, target, met)
		w("| stored after %d nights vs restic's | %s | %s | %.2f× | ≤ 1.00× | %s |\n", len(dd), mib(dd[last]), mib(restic[last]), float64(dd[last])/float64(restic[last]), yesNo(dd[last] <= restic[last]))
		if rmax := v.stored[dedupTools[3]]; len(rmax) > 0 {
			w("| stored after %d nights vs restic's at --compression max | %s | %s | %.2f× | ≤ 1.00× | %s |\n", len(dd), mib(dd[last]), mib(rmax[len(rmax)-1]), float64(dd[last])/float64(rmax[len(rmax)-1]), yesNo(dd[last] <= rmax[len(rmax)-1]))
		}
		w("| (context) restic's store vs one compressed full | %s | %s | %.2f× | | |\n", mib(restic[last]), mib(full), float64(restic[last])/float64(full))
		w("| (context) %d compressed fulls vs one | %s | %s | %.2f× | | |\n", len(plain), mib(plain[len(plain)-1]), mib(full), float64(plain[len(plain)-1])/float64(full))
	}
	p := v.backup.pipe.median()
	for i, target := range []float64{1 / 0.9, 0.5} {
		ref := v.backup.refs[i]
		ratio := timeRatio(p, ref.median())
		w("| backup time vs %s | %.2f s | %.2f s | %.2f× (throughput %.2f×) | ≤ %.2f× | %s |\n", ref.label, p.Seconds(), ref.median().Seconds(), ratio, 1/ratio, target, yesNo(ratio <= target))
	}
	if len(v.backup.pipe.times) > 1 {
		later := median(v.backup.pipe.times[1:])
		w("| (context) backup time of the nights after the first vs pipe without dedup | %.2f s | %.2f s | %.2f× | | |\n", later.Seconds(), median(v.backup.refs[0].times[1:]).Seconds(), timeRatio(later, median(v.backup.refs[0].times[1:])))
	}
	rp, rr := v.restore.pipe.median(), v.restore.refs[0].median()
	ratio := timeRatio(rp, rr)
	w("| restore time vs %s | %.2f s | %.2f s | %.2f× (throughput %.2f×) | ≤ 0.83× | %s |\n", v.restore.refs[0].label, rp.Seconds(), rr.Seconds(), ratio, 1/ratio, yesNo(ratio <= 1/1.2))
	w("| (context) restore time vs %s | %.2f s | %.2f s | %.2f× | | |\n", v.restore.refs[1].label, rp.Seconds(), v.restore.refs[1].median().Seconds(), timeRatio(rp, v.restore.refs[1].median()))
	nightsTail(w, "dedup backups", v.peak, v.budget, dedupTools, v.stored, v.runs)
}

// nightsTail ends a series' section: the peak RSS of pipe's largest
// process (of what) against its budget, each tool's store after each
// night, and pipe's newest run summary.
func nightsTail(w writer, what string, peak, budget int64, tools []string, stored map[string][]int64, runs []pipelineRun) {
	if budget > 0 && peak > 0 {
		w("| pipe's peak RSS (largest process) of the %s vs its budget | %s | %s | %.2f× | ≤ 1.00× | %s |\n", what, mib(peak), mib(budget), float64(peak)/float64(budget), yesNo(peak <= budget))
	}
	w("\nEach store's size after each night:\n\n")
	for _, t := range tools {
		var parts []string
		for _, n := range stored[t] {
			parts = append(parts, mib(n))
		}
		w("- %s: %s\n", t, strings.Join(parts, ", "))
	}
	if len(runs) > 0 {
		w("\npipe's run summary, %s: bottleneck %s; %s.\n", what, bottlenecks(runs), stageList(runs[len(runs)-1]))
	}
}
