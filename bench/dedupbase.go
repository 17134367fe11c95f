package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The deduplicated base backups scenario (issue: deduplicated runs, its
// last benchmark): a PostgreSQL 15 cluster that archives its WAL,
// pgbench -i, backed up seven times over the replication protocol by the
// postgres_basebackup source, with a dedup stage (1 MiB chunks, and 256
// KiB), and without one (zstd 3 and age: a compressed full each night),
// to the same disk. Between nights a share of pgbench_accounts' rows is
// updated in one key range and the server checkpoints: 2% of the rows (as
// the dumps' scenario), then, afresh, 1%. Then the newest night is
// restored by each into an empty folder and checked with pg_verifybackup,
// and the share of pages that changed a night is counted by comparing it
// with the first night's restore.

type dedupBaseResult struct {
	scale   int
	series  []*dedupBase
	version string
}

// dedupBase is one series of nights.
type dedupBase struct {
	name        string
	nights      int
	clusterSize int64
	backup      *race
	restore     *race
	// stored is each pipeline's store size after each night, for
	// dedupBaseTools[0] and [1].
	stored       map[string][]int64
	budget, peak int64
	// changed is the share of the data files' pages that differ between
	// the first night's restore and the newest's, over the nights between.
	changed float64
	runs    []pipelineRun
}

var dedupBaseTools = []string{"pipe, dedup", "pipe, no dedup (zstd 3, age)", "pipe, dedup with 256 KiB chunks"}

// dedupBaseStores are the pipelines' stores, in dedupBaseTools' order.
var dedupBaseStores = []string{"bb-dd", "bb-plain", "bb-dd256"}

func (b *bench) dedupBaseScenario(ctx context.Context) (*dedupBaseResult, error) {
	scale, nights := 100, 7
	if b.cfg.quick {
		scale, nights = 5, 3
	}
	verify, err := lookPG("pg_verifybackup")
	if err != nil {
		return nil, fmt.Errorf("pg_verifybackup (apt-get install postgresql-15) checks the restores: %w", err)
	}
	logf("scenario: deduplicated base backups, pgbench scale %d, %d nights of 2%% and of 1%% of pgbench_accounts changed in one key range", scale, nights)
	dir, err := os.MkdirTemp(b.cfg.workDir, "pipe-bench-dedupbase-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	// A server that archives its WAL (the source refuses one that does
	// not): into a folder of the container, the same for every pipeline
	// and outside what is measured.
	pg, err := startPG(ctx, "-c", "archive_mode=on", "-c", "archive_command=mkdir -p /tmp/wal && cp %p /tmp/wal/%f")
	if err != nil {
		return nil, err
	}
	defer pg.stop()
	pg.direct(ctx)
	db := &dedupBench{b: b, pg: pg, dir: dir, scale: scale}
	if err := db.keys(ctx); err != nil {
		return nil, err
	}
	// Replication connections from the host: the official image allows
	// only ordinary ones.
	hba, err := db.query(ctx, "SHOW hba_file")
	if err != nil {
		return nil, err
	}
	if err := db.pgExec(ctx, fmt.Sprintf(`echo "host replication all all scram-sha-256" >> %q`, hba)); err != nil {
		return nil, err
	}
	if err := db.psql(ctx, "SELECT pg_reload_conf()"); err != nil {
		return nil, err
	}
	res := &dedupBaseResult{scale: scale}
	for _, share := range []int{50, 100} {
		s, err := db.baseSeries(ctx, nights, share, verify)
		if err != nil {
			return nil, err
		}
		res.series = append(res.series, s)
	}
	if v, err := db.query(ctx, "SHOW server_version"); err == nil {
		res.version = "PostgreSQL " + v
	}
	return res, nil
}

// baseSeries runs one series: a fresh pgbench database and stores, the
// nights, in which 1/share of pgbench_accounts' rows change, and the
// restores.
func (db *dedupBench) baseSeries(ctx context.Context, nights, share int, verify string) (*dedupBase, error) {
	name := fmt.Sprintf("%d%% of pgbench_accounts' rows updated a night in one key range", 100/share)
	logf("  %s, %d nights", name, nights)
	if err := db.psql(ctx, "DROP TABLE IF EXISTS pgbench_accounts, pgbench_branches, pgbench_tellers, pgbench_history"); err != nil {
		return nil, err
	}
	if _, err := timeCommand(ctx, []string{"pgbench", "-i", "-q", "-s", strconv.Itoa(db.scale), db.pg.url(pgDB)}, pgEnvVars...); err != nil {
		return nil, fmt.Errorf("pgbench -i: %w", err)
	}
	if err := db.psql(ctx, "CHECKPOINT"); err != nil {
		return nil, err
	}
	for _, d := range append(dedupBaseStores, "out-bb") {
		os.RemoveAll(filepath.Join(db.dir, d))
	}
	for name, text := range db.basePipelines() {
		if err := os.WriteFile(filepath.Join(db.dir, name), []byte(text), 0o644); err != nil {
			return nil, err
		}
	}
	res := &dedupBase{name: name, nights: nights, stored: map[string][]int64{}}
	var err error
	if res.budget, err = planBudgetIn(ctx, db.dir, db.b.cfg.pipe, "bb-dd.hcl"); err != nil {
		return nil, err
	}
	rows := int64(db.scale) * 100000
	night := 0
	backup := &race{name: "base backup of the cluster, " + name, noWarmup: true}
	for i, label := range dedupBaseTools {
		c := &contender{label: label, run: db.baseBackupRun(res, i)}
		if i == 0 {
			c.clean = func() {
				night++
				if night == 1 {
					return
				}
				sql := fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid BETWEEN %d AND %d", night, 1+int64(night-2)*rows/int64(share), int64(night-1)*rows/int64(share))
				for _, q := range []string{sql, "CHECKPOINT"} {
					if err := db.psql(ctx, q); err != nil {
						logf("dedup: base night %d: %v", night, err)
					}
				}
			}
			backup.pipe = c
		} else {
			backup.refs = append(backup.refs, c)
		}
	}
	if err := backup.run(ctx, nights); err != nil {
		return nil, err
	}
	size, err := db.clusterSize(ctx)
	if err != nil {
		return nil, err
	}
	res.clusterSize, backup.bytes = size, size
	res.backup = backup

	out := filepath.Join(db.dir, "out-bb")
	check := func(ctx context.Context, rep int) error {
		// -n: the WAL the backup needs is in pg_wal, but parsing it is
		// pg_waldump's job; the files' checksums are what is checked here.
		if _, err := timeCommand(ctx, []string{verify, "-n", out}); err != nil {
			return fmt.Errorf("pg_verifybackup of the restored cluster: %w", err)
		}
		return nil
	}
	restore := &race{name: "restore of the newest base backup, " + name, bytes: size, noWarmup: true}
	restore.pipe = &contender{label: dedupBaseTools[0], clean: removing(out), run: db.restoreRun("restore-bb-dd"), check: check}
	restore.refs = []*contender{{label: dedupBaseTools[1], clean: removing(out), run: db.restoreRun("restore-bb-plain"), check: check}}
	if err := restore.run(ctx, max(1, min(db.b.cfg.reps, 3))); err != nil {
		return nil, err
	}
	res.restore = restore
	if res.changed, err = db.pagesChanged(ctx, out, nights); err != nil {
		return nil, err
	}
	return res, nil
}

// pagesChanged restores the first night's run beside newest (the newest
// night's restore) and returns the share of newest's data-file pages that
// differ from the first's, or that it lacks, a night.
func (db *dedupBench) pagesChanged(ctx context.Context, newest string, nights int) (float64, error) {
	runs, err := os.ReadDir(filepath.Join(db.dir, "bb-dd"))
	if err != nil {
		return 0, err
	}
	first := ""
	for _, e := range runs { // sorted: run ids start with their time
		if e.IsDir() && !strings.HasPrefix(e.Name(), "pipe-") {
			first = e.Name()
			break
		}
	}
	text := fmt.Sprintf(`pipeline "first" {
  source "fs" {
    path = "bb-dd/"
    run  = %q
  }
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "postgres_basebackup" {
    data_directory  = "out-bb-first"
    restore_command = "cp /tmp/wal/%%f %%p" # not run
  }
}
`, first)
	if err := os.WriteFile(filepath.Join(db.dir, "first.hcl"), []byte(text), 0o644); err != nil {
		return 0, err
	}
	old := filepath.Join(db.dir, "out-bb-first")
	defer os.RemoveAll(old)
	if _, err := runCommandIn(ctx, db.dir, []string{db.b.cfg.pipe, "run", "first.hcl", "--progress", "never"}, false); err != nil {
		return 0, fmt.Errorf("restoring the first night (%s): %w", first, err)
	}
	var pages, changed int64
	for _, dir := range []string{"base", "global"} {
		err := filepath.Walk(filepath.Join(newest, dir), func(path string, fi os.FileInfo, err error) error {
			if err != nil || !fi.Mode().IsRegular() {
				return err
			}
			rel, _ := filepath.Rel(newest, path)
			p, c, err := pagesDiffer(path, filepath.Join(old, rel))
			pages, changed = pages+p, changed+c
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	if pages == 0 || nights < 2 {
		return 0, nil
	}
	return float64(changed) / float64(pages) / float64(nights-1), nil
}

// pagesDiffer counts the 8 KiB pages of file newer, and those that differ
// from the same page of older (absent there included). It reads a page
// at a time: the harness's own memory would otherwise show in the peak
// RSS of the commands it starts next (a child shares its parent's pages
// until it execs).
func pagesDiffer(newer, older string) (pages, changed int64, err error) {
	a, err := os.Open(newer)
	if err != nil {
		return 0, 0, err
	}
	defer a.Close()
	b, err := os.Open(older)
	if err != nil && !os.IsNotExist(err) {
		return 0, 0, err
	}
	if b != nil {
		defer b.Close()
	}
	var pa, pb [8192]byte
	for {
		n, err := io.ReadFull(a, pa[:])
		if n == 0 {
			if err == io.EOF {
				return pages, changed, nil
			}
			return pages, changed, err
		}
		pages++
		m := 0
		if b != nil {
			m, _ = io.ReadFull(b, pb[:n])
		}
		if m < n || !bytes.Equal(pa[:n], pb[:n]) {
			changed++
		}
		if err == io.ErrUnexpectedEOF {
			return pages, changed, nil
		}
	}
}

// pgExec runs a shell command in the server's container, as its user.
func (db *dedupBench) pgExec(ctx context.Context, cmd string) error {
	code, r, err := db.pg.c.Exec(ctx, []string{"su", "postgres", "-c", cmd})
	if err == nil && code != 0 {
		b, _ := io.ReadAll(r)
		err = fmt.Errorf("exit %d: %s", code, b)
	}
	if err != nil {
		return fmt.Errorf("in the PostgreSQL container, %s: %w", cmd, err)
	}
	return nil
}

// clusterSize is the size of the cluster's databases.
func (db *dedupBench) clusterSize(ctx context.Context) (int64, error) {
	v, err := db.query(ctx, "SELECT sum(pg_database_size(oid)) FROM pg_database")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// baseBackupRun is pipeline i's base backup; its store's size after it
// goes to stored.
func (db *dedupBench) baseBackupRun(res *dedupBase, i int) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		m, err := runCommandIn(ctx, db.dir, []string{db.b.cfg.pipe, "run", dedupBaseStores[i] + ".hcl", "--json", "--progress", "never"}, false, "PIPE_VAR_pgpass="+pgPassword)
		if err != nil {
			return m, fmt.Errorf("%w\n%s", err, m.stdout) // --json: the error is in the summary
		}
		if i == 0 {
			var s runSummary
			if json.Unmarshal(m.stdout, &s) == nil && len(s.Pipelines) == 1 {
				res.runs = append(res.runs, s.Pipelines[0])
			}
			res.peak = max(res.peak, m.maxRSS)
		}
		n, err := duBytes(filepath.Join(db.dir, dedupBaseStores[i]))
		res.stored[dedupBaseTools[i]] = append(res.stored[dedupBaseTools[i]], n)
		return m, err
	}
}

// basePipelines are the base backups' pipelines (a file each, for pipe
// plan's budget) and p.hcl with their restores beside the dumps'.
func (db *dedupBench) basePipelines() map[string]string {
	source := fmt.Sprintf(`  source "postgres_basebackup" {
%s    checkpoint = "fast"
    label      = "bench"
  }
`, db.pg.attrs())
	// dedup is a dedup stage with the key and attrs.
	dedup := func(attrs string) string {
		return "  dedup {\n    key = file(\"keys/dedup.key\")\n" + attrs + "  }\n"
	}
	backup := func(name, stage string) string {
		return fmt.Sprintf(`variable "pgpass" { sensitive = true }
pipeline %q {
%s%s  compress {}
  encrypt { recipients = [file("keys/backup.pub")] }
  sink "fs" { path = "%s/${run.id}/" }
}
`, name, source, stage, name)
	}
	restore := func(name string) string {
		return fmt.Sprintf(`pipeline "restore-%s" {
  source "fs" { path = "%s/" }
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "postgres_basebackup" {
    data_directory  = "out-bb"
    restore_command = "cp /tmp/wal/%%f %%p" # not run: the restore is checked, not started
  }
}
`, name, name)
	}
	return map[string]string{
		"bb-dd.hcl":    backup("bb-dd", dedup("")),
		"bb-plain.hcl": backup("bb-plain", ""),
		"bb-dd256.hcl": backup("bb-dd256", dedup("    chunk_size = \"256KiB\"\n")),
		"p.hcl":        dedupPipelines + restore("bb-dd") + restore("bb-plain"),
	}
}

func (r *dedupBaseResult) races() []*race {
	var out []*race
	for _, s := range r.series {
		out = append(out, s.backup, s.restore)
	}
	return out
}

func (r *dedupBaseResult) markdown(w writer) {
	w("\n## Deduplicated base backups (a pgbench cluster, night after night)\n\n")
	w("%s, pgbench scale %d, in its container, archiving its WAL into a folder of its own. Each night (after the first) a share of pgbench_accounts' rows is updated in one key range, then a CHECKPOINT; then the postgres_basebackup source (checkpoint fast) backs the cluster up into each pipeline's store on the same local disk: with a dedup stage (1 MiB chunks; and 256 KiB), and without (zstd 3, age: a compressed full a night). The newest night is restored by the first two and checked with pg_verifybackup. Pages changed a night: the 8 KiB pages of the data files that differ between the first night's restore and the newest's (or are new), over the nights between.\n", r.version, r.scale)
	for _, s := range r.series {
		s.markdown(w)
	}
}

func (v *dedupBase) markdown(w writer) {
	w("\n### %s, %d nights (the cluster %s; %.1f%% of its pages changed a night)\n\n", v.name, v.nights, mib(v.clusterSize), 100*v.changed)
	w.table("what", "pipe", "reference", "pipe / reference", "target", "met?")
	dd, plain := v.stored[dedupBaseTools[0]], v.stored[dedupBaseTools[1]]
	if len(dd) > 0 && len(plain) > 0 {
		last, full := len(dd)-1, plain[0]
		ratio := float64(dd[last]) / float64(full)
		w("| stored after %d nights vs one compressed full | %s | %s | %.2f× | ≤ 1.50× | %s |\n", len(dd), mib(dd[last]), mib(full), ratio, yesNo(ratio <= 1.5))
		w("| (context) %d compressed fulls vs one | %s | %s | %.2f× | | |\n", len(plain), mib(plain[len(plain)-1]), mib(full), float64(plain[len(plain)-1])/float64(full))
		if small := v.stored[dedupBaseTools[2]]; len(small) > 0 {
			w("| (context) stored after %d nights with chunk_size = \"256KiB\" vs one compressed full | %s | %s | %.2f× | | |\n", len(small), mib(small[len(small)-1]), mib(full), float64(small[len(small)-1])/float64(full))
		}
	}
	p, ref := v.backup.pipe.median(), v.backup.refs[0].median()
	w("| (context) backup time vs %s | %.2f s | %.2f s | %.2f× | | |\n", v.backup.refs[0].label, p.Seconds(), ref.Seconds(), timeRatio(p, ref))
	rp, rr := v.restore.pipe.median(), v.restore.refs[0].median()
	w("| (context) restore time vs %s | %.2f s | %.2f s | %.2f× | | |\n", v.restore.refs[0].label, rp.Seconds(), rr.Seconds(), timeRatio(rp, rr))
	nightsTail(w, "dedup base backups", v.peak, v.budget, dedupBaseTools, v.stored, v.runs)
}
