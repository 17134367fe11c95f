package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcminio "github.com/testcontainers/testcontainers-go/modules/minio"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// The database benchmark: a PostgreSQL database backed up to MinIO and
// restored, pipe (one pg_dump stream, and table by table with jobs = 4)
// against the shell pipelines people write: pg_dump -Fc -Z0 | zstd -3 -T2 |
// mc pipe, and mc cat | zstd -d | pg_restore. Same server, same MinIO,
// interleaved.

const (
	pgImage    = "postgres:15"
	pgUser     = "bench"
	pgPassword = "bench-pg-secret-42"
	pgDB       = "app"
)

type pgResult struct {
	dbSize          int64
	rows            int64
	backup, restore *scenarioResult
	rss             map[string]int64 // direction+label → peak RSS of pipe's largest process
	refRSS          map[string]int64 // label → largest process of the shell pipeline
	zstdVersion     string
}

// pgDataset is pgbench's tables at scale accounts/100000 and an events table
// with text, numbers, timestamps and JSON, with the indexes and foreign
// keys a restore has to rebuild.
func pgBenchDataset(accounts, events int) []string {
	return []string{
		`CREATE TABLE pgbench_branches (bid int PRIMARY KEY, bbalance int, filler char(88))`,
		`CREATE TABLE pgbench_tellers (tid int PRIMARY KEY, bid int REFERENCES pgbench_branches, tbalance int, filler char(84))`,
		`CREATE TABLE pgbench_accounts (aid int PRIMARY KEY, bid int REFERENCES pgbench_branches, abalance int, filler char(84))`,
		fmt.Sprintf(`INSERT INTO pgbench_branches SELECT b, 0, '' FROM generate_series(1, %d) b`, accounts/100000),
		fmt.Sprintf(`INSERT INTO pgbench_tellers SELECT t, (t - 1) / 10 + 1, 0, '' FROM generate_series(1, %d) t`, accounts/10000),
		fmt.Sprintf(`INSERT INTO pgbench_accounts SELECT a, (a - 1) / 100000 + 1, (a::bigint * 7919 %% 10000)::int - 5000, '' FROM generate_series(1, %d) a`, accounts),
		`CREATE TABLE events (id bigserial PRIMARY KEY, account int NOT NULL REFERENCES pgbench_accounts, kind text NOT NULL,
			amount numeric(12,2), at timestamptz NOT NULL, payload jsonb, note text)`,
		fmt.Sprintf(`INSERT INTO events (account, kind, amount, at, payload, note)
			SELECT i %% %d + 1, (ARRAY['deposit','withdrawal','transfer','fee'])[i %% 4 + 1], (i %% 100000) / 100.0,
				timestamptz '2026-01-01 00:00:00+00' + i * interval '17 seconds',
				jsonb_build_object('i', i, 'tags', jsonb_build_array('a' || i %% 7, 'b' || i %% 11), 'ok', i %% 3 = 0),
				CASE WHEN i %% 5 = 0 THEN NULL ELSE md5(i::text) END
			FROM generate_series(1, %d) i`, accounts, events),
		`CREATE INDEX events_at ON events (at)`,
		`CREATE INDEX events_kind ON events (kind, account)`,
		`VACUUM ANALYZE`,
	}
}

func (b *bench) pgScenario(ctx context.Context, mc string) (*pgResult, error) {
	logf("scenario 7: PostgreSQL backup and restore through MinIO: pipe against pg_dump | zstd | mc")
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		if _, err := os.Stat("/.dockerenv"); err == nil {
			os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "localhost")
		}
	}
	for _, tool := range []string{"pg_dump", "pg_restore", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the database benchmark needs %s (Debian: postgresql-client, zstd)", tool)
		}
	}
	m, err := tcminio.Run(ctx, minioImage, tcminio.WithUsername(minioUser), tcminio.WithPassword(minioSecret))
	if m != nil {
		defer testcontainers.TerminateContainer(m)
	}
	if err != nil {
		return nil, fmt.Errorf("starting MinIO (docker and ../shared/testimages/build.sh): %w", err)
	}
	pg, err := tcpostgres.Run(ctx, pgImage, tcpostgres.WithDatabase(pgDB), tcpostgres.WithUsername(pgUser),
		tcpostgres.WithPassword(pgPassword), tcpostgres.BasicWaitStrategies(),
		// Docker's 64 MiB /dev/shm is too small for parallel VACUUM and
		// index builds; the official image's docs say to raise it.
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.ShmSize = 1 << 30 }))
	if pg != nil {
		defer testcontainers.TerminateContainer(pg)
	}
	if err != nil {
		return nil, fmt.Errorf("starting PostgreSQL (docker and ../shared/testimages/build.sh): %w", err)
	}
	hostPort, err := m.ConnectionString(ctx)
	if err != nil {
		return nil, err
	}
	pgHost, err := pg.Host(ctx)
	if err != nil {
		return nil, err
	}
	pgPort, err := pg.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return nil, err
	}
	url := func(db string) string {
		return fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", pgUser, pgHost, pgPort.Port(), db)
	}
	pgEnv := []string{"PGPASSWORD=" + pgPassword}
	mcEnv := []string{"MC_HOST_" + mcAlias + "=http://" + minioUser + ":" + minioSecret + "@" + hostPort, "MC_CONFIG_DIR=" + filepath.Join(b.work, "mc-config")}
	if _, err := timeCommand(ctx, []string{mc, "mb", mcAlias + "/" + s3Bucket}, mcEnv...); err != nil {
		return nil, err
	}

	accounts, events := 5_000_000, 3_000_000
	if b.cfg.quick {
		accounts, events = 500_000, 300_000
	}
	admin, err := pgx.Connect(ctx, url("postgres")+"&password="+pgPassword)
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	app, err := pgx.Connect(ctx, url(pgDB)+"&password="+pgPassword)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for _, q := range pgBenchDataset(accounts, events) {
		if _, err := app.Exec(ctx, q); err != nil {
			app.Close(ctx)
			return nil, fmt.Errorf("loading the data set: %s: %w", q, err)
		}
	}
	res := &pgResult{rss: map[string]int64{}, refRSS: map[string]int64{}}
	err = app.QueryRow(ctx, `SELECT pg_database_size(current_database()), (SELECT count(*) FROM pgbench_accounts) + (SELECT count(*) FROM events)`).Scan(&res.dbSize, &res.rows)
	app.Close(ctx)
	if err != nil {
		return nil, err
	}
	logf("  data set: %s on disk, %d rows, loaded in %s", mib(res.dbSize), res.rows, time.Since(start).Round(time.Second))
	if out, err := exec.Command("zstd", "--version").Output(); err == nil {
		res.zstdVersion = strings.TrimSpace(string(out))
	}

	s3 := fmt.Sprintf(`    bucket            = %q
    endpoint          = %q
    region            = "us-east-1"
    path_style        = true
    access_key_id     = %q
    secret_access_key = var.secret
`, s3Bucket, "http://"+hostPort, minioUser)
	pgConn := fmt.Sprintf(`    host     = %q
    port     = %s
    user     = %q
    password = var.pgpass
    sslmode  = "disable"
`, pgHost, pgPort.Port(), pgUser)
	pipeFile := func(name, body string) (string, error) {
		p := filepath.Join(b.hcl, name+".hcl")
		text := fmt.Sprintf("variable \"secret\" {\n  sensitive = true\n}\nvariable \"pgpass\" {\n  sensitive = true\n}\n\npipeline %q {\n%s}\n", name, body)
		return p, os.WriteFile(p, []byte(text), 0o644)
	}
	pipeEnv := []string{"PIPE_VAR_secret=" + minioSecret, "PIPE_VAR_pgpass=" + pgPassword}
	backupFile := func(name string, jobs int) (string, error) {
		return pipeFile(name, fmt.Sprintf("  source \"postgres\" {\n%s    database = %q\n    jobs     = %d\n  }\n  compress {\n    codec   = \"zstd\"\n    level   = 3\n    workers = 2\n  }\n  sink \"s3\" {\n%s    key               = \"pg/%s/\"\n  }\n",
			pgConn, pgDB, jobs, s3, name))
	}
	restoreFile := func(name, from, db string, jobs int) (string, error) {
		return pipeFile(name, fmt.Sprintf("  source \"s3\" {\n%s    prefix            = \"pg/%s/\"\n  }\n  decompress {}\n  sink \"postgres\" {\n%s    database = %q\n    jobs     = %d\n  }\n",
			s3, from, pgConn, db, jobs))
	}
	rmPrefix := func(prefix string) func() {
		return func() {
			timeCommand(ctx, []string{mc, "rm", "--recursive", "--force", "--quiet", mcAlias + "/" + s3Bucket + "/" + prefix}, mcEnv...)
		}
	}

	// Backup.
	fCustom, err := backupFile("custom", 1)
	if err != nil {
		return nil, err
	}
	fParallel, err := backupFile("parallel", 4)
	if err != nil {
		return nil, err
	}
	refKey := mcAlias + "/" + s3Bucket + "/pg/ref/app.dump.zst"
	shell := func(script string, env []string) func(ctx context.Context) (measurement, error) {
		return func(ctx context.Context) (measurement, error) {
			return timeCommand(ctx, []string{"bash", "-o", "pipefail", "-c", script}, env...)
		}
	}
	backupRef := shell(fmt.Sprintf("pg_dump -Fc -Z0 --dbname=%q | zstd -q -3 -T2 | %q pipe %q", url(pgDB), mc, refKey), append(pgEnv, mcEnv...))
	pipeRunner := func(direction, label, file string) *contender {
		c := &contender{label: label}
		c.run = func(ctx context.Context, rep int) (measurement, error) {
			// rusage's peak of the largest process: sampling /proc for
			// the sum would cost pipe CPU in a CPU-bound race.
			r, err := runPipe(ctx, b.cfg.pipe, file, -1, pipeEnv...)
			res.rss[direction+label] = max(res.rss[direction+label], r.maxRSS)
			return r.measurement, err
		}
		return c
	}
	bk := &scenarioResult{name: fmt.Sprintf("backup of a %s database to MinIO", mib(res.dbSize)), bytes: res.dbSize}
	bk.pipe = pipeRunner("backup", "pipe, jobs = 4", fParallel)
	bk.pipe.clean = rmPrefix("pg/parallel/")
	custom := pipeRunner("backup", "pipe, custom format", fCustom)
	custom.clean = rmPrefix("pg/custom/")
	ref := &contender{label: "pg_dump | zstd | mc pipe", clean: rmPrefix("pg/ref/")}
	ref.run = func(ctx context.Context, rep int) (measurement, error) {
		m, err := backupRef(ctx)
		res.refRSS[ref.label] = max(res.refRSS[ref.label], m.maxRSS)
		return m, err
	}
	bk.refs = []*contender{ref, custom}
	if err := bk.interleave(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	res.backup = bk

	// Restore each backup into a fresh, empty database (created untimed),
	// then check its rows.
	fresh := func(db string) func() {
		return func() {
			admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			admin.Exec(ctx, "CREATE DATABASE "+db)
			// Every restore starts with nothing dirty in the server: the
			// previous one's writes are not flushed during this one.
			admin.Exec(ctx, "CHECKPOINT")
		}
	}
	check := func(ctx context.Context, db string) error {
		c, err := pgx.Connect(ctx, url(db)+"&password="+pgPassword)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		var rows int64
		var indexes int
		if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pgbench_accounts) + (SELECT count(*) FROM events), (SELECT count(*) FROM pg_indexes WHERE schemaname = 'public')`).Scan(&rows, &indexes); err != nil {
			return fmt.Errorf("checking the restore into %s: %w", db, err)
		}
		if rows != res.rows || indexes != 6 {
			return fmt.Errorf("the restore into %s has %d rows and %d indexes, want %d and 6", db, rows, indexes, res.rows)
		}
		return nil
	}
	rCustom, err := restoreFile("restore_custom", "custom", "r_custom", 1)
	if err != nil {
		return nil, err
	}
	rParallel, err := restoreFile("restore_parallel", "parallel", "r_parallel", 4)
	if err != nil {
		return nil, err
	}
	restoreRunner := func(label, file, db string) *contender {
		c := pipeRunner("restore", label, file)
		run := c.run
		c.clean = fresh(db)
		c.run = func(ctx context.Context, rep int) (measurement, error) {
			m, err := run(ctx, rep)
			if err == nil {
				err = check(ctx, db)
			}
			return m, err
		}
		return c
	}
	rs := &scenarioResult{name: fmt.Sprintf("restore of the %s database from MinIO", mib(res.dbSize)), bytes: res.dbSize}
	rs.pipe = restoreRunner("pipe, jobs = 4", rParallel, "r_parallel")
	restoreRef := shell(fmt.Sprintf("%q cat %q | zstd -q -d | pg_restore --exit-on-error --dbname=%q", mc, refKey, url("r_ref")), append(pgEnv, mcEnv...))
	rref := &contender{label: "mc cat | zstd -d | pg_restore", clean: fresh("r_ref")}
	rref.run = func(ctx context.Context, rep int) (measurement, error) {
		m, err := restoreRef(ctx)
		res.refRSS[rref.label] = max(res.refRSS[rref.label], m.maxRSS)
		if err == nil {
			err = check(ctx, "r_ref")
		}
		return m, err
	}
	rs.refs = []*contender{rref, restoreRunner("pipe, custom format", rCustom, "r_custom")}
	if err := rs.interleave(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	res.restore = rs
	return res, nil
}

func (r *pgResult) markdown(w func(string, ...any)) {
	w("\n## PostgreSQL: backup and restore through MinIO\n\n")
	w("PostgreSQL 15 (postgres:15 container) and MinIO on the same 2-CPU machine; a %s database (pgbench_accounts and an events table with JSON, %d rows, 6 indexes, foreign keys). The reference is the shell pipeline: `pg_dump -Fc -Z0 | zstd -3 -T2 | mc pipe` and `mc cat | zstd -d | pg_restore` (%s); pipe compresses with zstd level 3 on 2 workers as well (the `-T2` of the reference). Each restore goes into a fresh empty database (created untimed) and is checked for its rows and indexes. Medians of interleaved runs; a time ratio below 1 means pipe is faster.\n\n", mib(r.dbSize), r.rows, r.zstdVersion)
	w("| direction | shell pipeline | pipe, custom format | pipe, jobs = 4 | custom / shell | jobs = 4 / shell | targets (≤) | met? |\n|---|---|---|---|---|---|---|---|\n")
	for _, s := range []*scenarioResult{r.backup, r.restore} {
		ref, custom, par := median(s.refs[0].times), median(s.refs[1].times), median(s.pipe.times)
		rc, rp := float64(custom)/float64(ref), float64(par)/float64(ref)
		fastest := min(rc, rp)
		direction := strings.SplitN(s.name, " ", 2)[0]
		w("| %s | %s | %s | %s | %.2f× | %.2f× | 1.00× custom, 0.80× fastest | %s, %s |\n", direction, ref.Round(10*time.Millisecond), custom.Round(10*time.Millisecond),
			par.Round(10*time.Millisecond), rc, rp, yesNo(rc <= 1.0), yesNo(fastest <= 0.8))
	}
	w("\nPeak memory (rusage: the largest process of the run, pipe's or a plugin's, and of the shell pipeline; a summed figure for pipe is in the memory scenario):\n\n| run | peak RSS |\n|---|---|\n")
	for _, s := range []*scenarioResult{r.backup, r.restore} {
		direction := strings.SplitN(s.name, " ", 2)[0]
		w("| %s, %s | %s |\n", direction, strings.ReplaceAll(s.refs[0].label, "|", `\|`), mib(r.refRSS[s.refs[0].label]))
		w("| %s, %s | %s |\n", direction, s.refs[1].label, mib(r.rss[direction+s.refs[1].label]))
		w("| %s, %s | %s |\n", direction, s.pipe.label, mib(r.rss[direction+s.pipe.label]))
	}
	w("\nCPU seconds per run (user + system of the client processes; the server's work is not counted): ")
	for _, s := range []*scenarioResult{r.backup, r.restore} {
		for _, c := range append([]*contender{s.pipe}, s.refs...) {
			w("%s %s %.1f s; ", strings.SplitN(s.name, " ", 2)[0], c.label, median(c.cpu).Seconds())
		}
	}
	w("\n")
}
