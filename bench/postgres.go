package main

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The database benchmark: a PostgreSQL database backed up to MinIO and
// restored, pipe (one pg_dump stream, and table by table with jobs = 4)
// against the shell pipelines people write: pg_dump -Fc -Z0 | zstd -3 -T2 |
// mc pipe, and mc cat | zstd -d | pg_restore. Same server, same MinIO,
// interleaved.

type pgResult struct {
	direct          bool // connected past docker-proxy
	cpus            int  // the machine's, which the containers share
	dbSize          int64
	rows            int64
	indexes         int
	backup, restore *race
	zstdVersion     string
}

func (b *bench) pgScenario(ctx context.Context) (*pgResult, error) {
	logf("scenario 7: PostgreSQL backup and restore through MinIO: pipe against pg_dump | zstd | mc")
	if err := needTools(exec.LookPath, "Debian: postgresql-client, zstd", "pg_dump", "pg_restore", "zstd"); err != nil {
		return nil, err
	}
	m, err := b.startMinIO(ctx, b.cfg.mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	pg, err := startPG(ctx)
	if err != nil {
		return nil, err
	}
	defer pg.stop()
	minioDirect, pgDirect := m.direct(ctx), pg.direct(ctx)
	res := &pgResult{direct: minioDirect && pgDirect, cpus: runtime.NumCPU()}

	accounts, events := 5_000_000, 3_000_000
	if b.cfg.quick {
		accounts, events = 500_000, 300_000
	}
	start := time.Now()
	data, err := pg.load(ctx, pgDB, pgBenchDataset(accounts, events))
	if err != nil {
		return nil, err
	}
	res.dbSize, res.rows, res.indexes = data.size, data.rows, data.indexes
	logf("  data set: %s on disk, %d rows, %d indexes, loaded in %s", mib(res.dbSize), res.rows, res.indexes, time.Since(start).Round(time.Second))
	if out, err := exec.Command("zstd", "--version").Output(); err == nil {
		res.zstdVersion = strings.TrimSpace(string(out))
	}
	admin, err := pg.connect(ctx, "postgres")
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	p := &pgBench{bench: b, m: m, pg: pg, admin: admin, res: res,
		pipeEnv: []string{"PIPE_VAR_secret=" + minioSecret, "PIPE_VAR_pgpass=" + pgPassword},
		refEnv:  append(slices.Clone(pgEnvVars), m.mcEnv...),
		refKey:  mcAlias + "/" + s3Bucket + "/pg/ref/app.dump.zst"}
	if res.backup, err = p.backupRace(ctx); err != nil {
		return nil, err
	}
	if res.restore, err = p.restoreRace(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// pgBench is the postgres scenario's set-up: the server with its data set
// loaded, MinIO, and the environment of each contender.
type pgBench struct {
	*bench
	m       *minio
	pg      *pgServer
	admin   *pgx.Conn // to the server's postgres database
	res     *pgResult
	pipeEnv []string
	refEnv  []string // the shell pipelines'
	refKey  string   // the shell pipeline's object, as mc names it
}

// pipeFile writes a pipeline file with the secrets of MinIO and the
// server as variables.
func (p *pgBench) pipeFile(name, body string) (string, error) {
	return writePipeline(p.hcl, name, body, "secret", "pgpass")
}

// backupFile writes the backup pipeline name: pg_dump (jobs streams) to
// zstd on 2 workers to MinIO under pg/name/. head is what opens the body
// (a profile), level the compression level's line ("" for the profile's).
func (p *pgBench) backupFile(name string, jobs int, head, level string) (string, error) {
	return p.pipeFile(name, fmt.Sprintf("%s  source \"postgres\" {\n%s    database = %q\n    jobs     = %d\n  }\n  compress {\n    codec   = \"zstd\"\n%s    workers = 2\n  }\n  sink \"s3\" {\n%s    key               = \"pg/%s/\"\n  }\n",
		head, p.pg.attrs(), pgDB, jobs, level, p.m.attrs(), name))
}

// restoreFile writes the restore pipeline name: the backup under pg/from/
// into the database db, with jobs streams.
func (p *pgBench) restoreFile(name, from, db string, jobs int) (string, error) {
	return p.pipeFile(name, fmt.Sprintf("  source \"s3\" {\n%s    prefix            = \"pg/%s/\"\n  }\n  decompress {}\n  sink \"postgres\" {\n%s    database = %q\n    jobs     = %d\n  }\n",
		p.m.attrs(), from, p.pg.attrs(), db, jobs))
}

const (
	level3     = "    level   = 3\n"
	turboLabel = "pipe, turbo profile, custom format"
)

// backupRace: pipe table by table (jobs = 4), the shell pipeline, pipe in
// custom format (one stream, as pg_dump -Fc) and pipe's fastest mode, the
// turbo profile (zstd level 1). Each starts with its objects deleted.
//
// Peak memory is rusage's, of the largest process (contender.maxRSS):
// sampling /proc for pipe's sum would cost pipe CPU in a CPU-bound race.
func (p *pgBench) backupRace(ctx context.Context) (*race, error) {
	files := map[string]string{}
	for _, f := range []struct {
		name        string
		jobs        int
		head, level string
	}{{"custom", 1, "", level3}, {"parallel", 4, "", level3}, {"turbo", 1, "  profile = \"turbo\"\n", ""}} {
		file, err := p.backupFile(f.name, f.jobs, f.head, f.level)
		if err != nil {
			return nil, err
		}
		files[f.name] = file
	}
	pipe := func(label, name string) *contender {
		return &contender{label: label, clean: p.m.emptier(ctx, p.cfg.mc, "pg/"+name+"/"), run: p.pipeRun(files[name], -1, p.pipeEnv...)}
	}
	r := &race{name: fmt.Sprintf("backup of a %s database to MinIO", mib(p.res.dbSize)), bytes: p.res.dbSize,
		pipe: pipe("pipe, jobs = 4", "parallel"),
		refs: []*contender{
			{label: "pg_dump | zstd | mc pipe", clean: p.m.emptier(ctx, p.cfg.mc, "pg/ref/"),
				run: script(fmt.Sprintf("pg_dump -Fc -Z0 --dbname=%q | zstd -q -3 -T2 | %q pipe %q", p.pg.url(pgDB), p.cfg.mc, p.refKey), p.refEnv)},
			pipe("pipe, custom format", "custom"),
			pipe(turboLabel, "turbo"),
		}}
	return r, r.run(ctx, p.cfg.reps)
}

// restoreRace restores each backup into a fresh, empty database (created
// untimed), then checks its rows and indexes: pipe table by table, the
// shell pipeline, pipe in custom format.
func (p *pgBench) restoreRace(ctx context.Context) (*race, error) {
	rCustom, err := p.restoreFile("restore_custom", "custom", "r_custom", 1)
	if err != nil {
		return nil, err
	}
	rParallel, err := p.restoreFile("restore_parallel", "parallel", "r_parallel", 4)
	if err != nil {
		return nil, err
	}
	into := func(label, db string, run runFunc) *contender {
		return &contender{label: label, clean: p.fresh(ctx, db), run: run, check: p.restored(db)}
	}
	r := &race{name: fmt.Sprintf("restore of the %s database from MinIO", mib(p.res.dbSize)), bytes: p.res.dbSize,
		pipe: into("pipe, jobs = 4", "r_parallel", p.pipeRun(rParallel, -1, p.pipeEnv...)),
		refs: []*contender{
			into("mc cat | zstd -d | pg_restore", "r_ref",
				script(fmt.Sprintf("%q cat %q | zstd -q -d | pg_restore --exit-on-error --dbname=%q", p.cfg.mc, p.refKey, p.pg.url("r_ref")), p.refEnv)),
			into("pipe, custom format", "r_custom", p.pipeRun(rCustom, -1, p.pipeEnv...)),
		}}
	return r, r.run(ctx, p.cfg.reps)
}

// fresh is a clean that makes db a new, empty database.
func (p *pgBench) fresh(ctx context.Context, db string) func() {
	return func() {
		_, _ = p.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		_, _ = p.admin.Exec(ctx, "CREATE DATABASE "+db)
		// Every restore starts with nothing dirty in the server: the
		// previous one's writes are not flushed during this one.
		_, _ = p.admin.Exec(ctx, "CHECKPOINT")
	}
}

// restored checks that db holds the data set's rows and indexes.
func (p *pgBench) restored(db string) checkFunc {
	return func(ctx context.Context, rep int) error {
		c, err := p.pg.connect(ctx, db)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		var rows int64
		var indexes int
		if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pgbench_accounts) + (SELECT count(*) FROM events), (SELECT count(*) FROM pg_indexes WHERE schemaname = 'public')`).Scan(&rows, &indexes); err != nil {
			return fmt.Errorf("checking the restore into %s: %w", db, err)
		}
		if rows != p.res.rows || indexes != p.res.indexes {
			return fmt.Errorf("the restore into %s has %d rows and %d indexes, want %d and %d", db, rows, indexes, p.res.rows, p.res.indexes)
		}
		return nil
	}
}

func (r *pgResult) races() []*race { return []*race{r.backup, r.restore} }

func (r *pgResult) markdown(w writer) {
	w("\n## PostgreSQL: backup and restore through MinIO\n\n")
	w("PostgreSQL (%s container) and MinIO on the same %d-CPU machine; a %s database (pgbench_accounts and an events table with JSON, %d rows, %d indexes, foreign keys). The reference is the shell pipeline: `pg_dump -Fc -Z0 | zstd -3 -T2 | mc pipe` and `mc cat | zstd -d | pg_restore` (%s); pipe compresses with zstd level 3 on 2 workers as well (the `-T2` of the reference). Each restore goes into a fresh empty database (created untimed) and is checked for its rows and indexes. %s Medians of interleaved runs; a time ratio below 1 means pipe is faster.\n\n", pgImage, r.cpus, mib(r.dbSize), r.rows, r.indexes, r.zstdVersion, connectionNote(r.direct))
	directions := []namedRace{{"backup", r.backup}, {"restore", r.restore}}
	w.table("direction", "shell pipeline", "pipe, custom format", "pipe, jobs = 4", "custom / shell", "jobs = 4 / shell", "targets (≤)", "met?")
	for _, d := range directions {
		ref, custom, par := d.race.refs[0].median(), d.race.refs[1].median(), d.race.pipe.median()
		rc, rp := timeRatio(custom, ref), timeRatio(par, ref)
		w("| %s | %s | %s | %s | %.2f× | %.2f× | 1.00× custom, 0.80× fastest | %s, %s |\n", d.name, ref.Round(10*time.Millisecond), custom.Round(10*time.Millisecond),
			par.Round(10*time.Millisecond), rc, rp, yesNo(rc <= 1.0), yesNo(min(rc, rp, turboRatio(d.race)) <= 0.8))
	}
	if len(r.backup.refs) > 2 {
		t := r.backup.refs[2]
		w("\nBackup in pipe's fastest mode, %s (zstd level 1, so larger objects than level 3's): %s, %.2f× the shell pipeline.\n", t.label, t.median().Round(10*time.Millisecond), turboRatio(r.backup))
	}
	w("\nPeak memory (rusage: the largest process of the run, pipe's or a plugin's, and of the shell pipeline; a summed figure for pipe is in the memory scenario):\n\n")
	w.table("run", "peak RSS")
	for _, d := range directions {
		for _, c := range d.race.contenders() {
			w("| %s, %s | %s |\n", d.name, strings.ReplaceAll(c.label, "|", `\|`), mib(c.maxRSS))
		}
	}
	cpuPerRun(w, directions)
}

// turboRatio is the time ratio of the turbo-profile run to the shell
// pipeline's, when r has one (+Inf otherwise).
func turboRatio(r *race) float64 {
	if len(r.refs) < 3 {
		return math.Inf(1)
	}
	return timeRatio(r.refs[2].median(), r.refs[0].median())
}
