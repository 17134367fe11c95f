package main

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
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
	direct          bool // connected past docker-proxy
	cpus            int  // the machine's, which the containers share
	dbSize          int64
	rows            int64
	indexes         int
	backup, restore *scenarioResult
	zstdVersion     string
}

// pgBenchDataset is pgbench's tables at scale accounts/100000 and an events table
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
	for _, tool := range []string{"pg_dump", "pg_restore", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the database benchmark needs %s (Debian: postgresql-client, zstd)", tool)
		}
	}
	m, err := b.startMinIO(ctx, mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	pgs, err := startPG(ctx)
	if err != nil {
		return nil, err
	}
	defer pgs.stop()
	minioDirect, pgDirect := m.direct(ctx), pgs.direct(ctx)
	mcEnv := m.mcEnv
	pgHost, url, connect, pgEnv := pgs.host, pgs.url, pgs.connect, pgEnvVars
	pgPort := pgs.port

	accounts, events := 5_000_000, 3_000_000
	if b.cfg.quick {
		accounts, events = 500_000, 300_000
	}
	admin, err := connect(ctx, "postgres")
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	res := &pgResult{direct: minioDirect && pgDirect, cpus: runtime.NumCPU()}
	if err := loadDataset(ctx, connect, pgBenchDataset(accounts, events), res); err != nil {
		return nil, err
	}
	if out, err := exec.Command("zstd", "--version").Output(); err == nil {
		res.zstdVersion = strings.TrimSpace(string(out))
	}

	s3 := m.attrs()
	pgConn := fmt.Sprintf(`    host     = %q
    port     = %s
    user     = %q
    password = var.pgpass
    sslmode  = "disable"
`, pgHost, pgPort, pgUser)
	pipeFile := func(name, body string) (string, error) { return writePipeline(b.hcl, name, body, "secret", "pgpass") }
	pipeEnv := []string{"PIPE_VAR_secret=" + minioSecret, "PIPE_VAR_pgpass=" + pgPassword}
	// head is what opens a pipeline's body: a profile, a compression
	// level (level 3 unless the profile sets it).
	backupFile := func(name string, jobs int, head, level string) (string, error) {
		return pipeFile(name, fmt.Sprintf("%s  source \"postgres\" {\n%s    database = %q\n    jobs     = %d\n  }\n  compress {\n    codec   = \"zstd\"\n%s    workers = 2\n  }\n  sink \"s3\" {\n%s    key               = \"pg/%s/\"\n  }\n",
			head, pgConn, pgDB, jobs, level, s3, name))
	}
	const level3 = "    level   = 3\n"
	restoreFile := func(name, from, db string, jobs int) (string, error) {
		return pipeFile(name, fmt.Sprintf("  source \"s3\" {\n%s    prefix            = \"pg/%s/\"\n  }\n  decompress {}\n  sink \"postgres\" {\n%s    database = %q\n    jobs     = %d\n  }\n",
			s3, from, pgConn, db, jobs))
	}
	rmPrefix := func(prefix string) func() { return m.emptier(ctx, mc, prefix) }

	// Backup.
	fCustom, err := backupFile("custom", 1, "", level3)
	if err != nil {
		return nil, err
	}
	fParallel, err := backupFile("parallel", 4, "", level3)
	if err != nil {
		return nil, err
	}
	// pipe's fastest mode: the turbo profile, whose zstd level is 1.
	fTurbo, err := backupFile("turbo", 1, "  profile = \"turbo\"\n", "")
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
	// Peak memory is rusage's, of the largest process (contender.maxRSS):
	// sampling /proc for pipe's sum would cost pipe CPU in a CPU-bound race.
	pipeRunner := func(label, file string) *contender {
		c := &contender{label: label}
		c.run = func(ctx context.Context, rep int) (measurement, error) {
			r, err := runPipe(ctx, b.cfg.pipe, file, -1, pipeEnv...)
			return r.measurement, err
		}
		return c
	}
	bk := &scenarioResult{name: fmt.Sprintf("backup of a %s database to MinIO", mib(res.dbSize)), bytes: res.dbSize}
	bk.pipe = pipeRunner("pipe, jobs = 4", fParallel)
	bk.pipe.clean = rmPrefix("pg/parallel/")
	custom := pipeRunner("pipe, custom format", fCustom)
	custom.clean = rmPrefix("pg/custom/")
	ref := &contender{label: "pg_dump | zstd | mc pipe", clean: rmPrefix("pg/ref/"), run: func(ctx context.Context, rep int) (measurement, error) { return backupRef(ctx) }}
	turbo := pipeRunner(turboLabel, fTurbo)
	turbo.clean = rmPrefix("pg/turbo/")
	bk.refs = []*contender{ref, custom, turbo}
	if err := bk.interleave(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	res.backup = bk

	// Restore each backup into a fresh, empty database (created untimed),
	// then check its rows.
	fresh := func(db string) func() {
		return func() {
			_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			_, _ = admin.Exec(ctx, "CREATE DATABASE "+db)
			// Every restore starts with nothing dirty in the server: the
			// previous one's writes are not flushed during this one.
			_, _ = admin.Exec(ctx, "CHECKPOINT")
		}
	}
	check := func(ctx context.Context, db string) error {
		c, err := connect(ctx, db)
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		var rows int64
		var indexes int
		if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM pgbench_accounts) + (SELECT count(*) FROM events), (SELECT count(*) FROM pg_indexes WHERE schemaname = 'public')`).Scan(&rows, &indexes); err != nil {
			return fmt.Errorf("checking the restore into %s: %w", db, err)
		}
		if rows != res.rows || indexes != res.indexes {
			return fmt.Errorf("the restore into %s has %d rows and %d indexes, want %d and %d", db, rows, indexes, res.rows, res.indexes)
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
		c := pipeRunner(label, file)
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

// pgServer is the benchmark's PostgreSQL container.
type pgServer struct {
	host string
	port string
	c    testcontainers.Container
}

// startPG starts PostgreSQL in a container, with pgDB as its database.
func startPG(ctx context.Context) (*pgServer, error) {
	pg, err := tcpostgres.Run(ctx, pgImage, tcpostgres.WithDatabase(pgDB), tcpostgres.WithUsername(pgUser),
		tcpostgres.WithPassword(pgPassword), tcpostgres.BasicWaitStrategies(),
		// Docker's 64 MiB /dev/shm is too small for parallel VACUUM and
		// index builds; the official image's docs say to raise it.
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.ShmSize = 1 << 30 }))
	s := &pgServer{c: pg}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("starting PostgreSQL (docker and ../shared/testimages/build.sh): %w", err)
	}
	if s.host, err = pg.Host(ctx); err != nil {
		s.stop()
		return nil, err
	}
	port, err := pg.MappedPort(ctx, "5432/tcp")
	if err != nil {
		s.stop()
		return nil, err
	}
	s.port = port.Port()
	return s, nil
}

// direct connects to the container's own address, bypassing docker-proxy
// (see directAddr), when the host can reach it.
func (s *pgServer) direct(ctx context.Context) bool {
	host, port, ok := directAddr(ctx, s.c, "5432/tcp")
	if ok {
		s.host, s.port = host, port
	}
	return ok
}

func (s *pgServer) stop() {
	if s.c != nil {
		_ = testcontainers.TerminateContainer(s.c)
	}
}

// url is a libpq URL for db, without the password (the tools get it in
// env).
func (s *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", pgUser, s.host, s.port, db)
}

func (s *pgServer) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, s.url(db)+"&password="+pgPassword)
}

// pgEnvVars give the PostgreSQL tools the password.
var pgEnvVars = []string{"PGPASSWORD=" + pgPassword}

// loadDataset runs the data set's statements and measures what it made.
func loadDataset(ctx context.Context, connect func(context.Context, string) (*pgx.Conn, error), sql []string, res *pgResult) error {
	app, err := connect(ctx, pgDB)
	if err != nil {
		return err
	}
	defer app.Close(context.Background())
	start := time.Now()
	for _, q := range sql {
		if _, err := app.Exec(ctx, q); err != nil {
			return fmt.Errorf("loading the data set: %s: %w", q, err)
		}
	}
	if err := app.QueryRow(ctx, `SELECT pg_database_size(current_database()), (SELECT count(*) FROM pgbench_accounts) + (SELECT count(*) FROM events),
		(SELECT count(*) FROM pg_indexes WHERE schemaname = 'public')`).Scan(&res.dbSize, &res.rows, &res.indexes); err != nil {
		return err
	}
	logf("  data set: %s on disk, %d rows, %d indexes, loaded in %s", mib(res.dbSize), res.rows, res.indexes, time.Since(start).Round(time.Second))
	return nil
}

func (r *pgResult) markdown(w func(string, ...any)) {
	w("\n## PostgreSQL: backup and restore through MinIO\n\n")
	w("PostgreSQL (%s container) and MinIO on the same %d-CPU machine; a %s database (pgbench_accounts and an events table with JSON, %d rows, %d indexes, foreign keys). The reference is the shell pipeline: `pg_dump -Fc -Z0 | zstd -3 -T2 | mc pipe` and `mc cat | zstd -d | pg_restore` (%s); pipe compresses with zstd level 3 on 2 workers as well (the `-T2` of the reference). Each restore goes into a fresh empty database (created untimed) and is checked for its rows and indexes. %s Medians of interleaved runs; a time ratio below 1 means pipe is faster.\n\n", pgImage, r.cpus, mib(r.dbSize), r.rows, r.indexes, r.zstdVersion, connectionNote(r.direct))
	directions := []struct {
		name string
		s    *scenarioResult
	}{{"backup", r.backup}, {"restore", r.restore}}
	w("| direction | shell pipeline | pipe, custom format | pipe, jobs = 4 | custom / shell | jobs = 4 / shell | targets (≤) | met? |\n|---|---|---|---|---|---|---|---|\n")
	for _, d := range directions {
		ref, custom, par := median(d.s.refs[0].times), median(d.s.refs[1].times), median(d.s.pipe.times)
		rc, rp := float64(custom)/float64(ref), float64(par)/float64(ref)
		w("| %s | %s | %s | %s | %.2f× | %.2f× | 1.00× custom, 0.80× fastest | %s, %s |\n", d.name, ref.Round(10*time.Millisecond), custom.Round(10*time.Millisecond),
			par.Round(10*time.Millisecond), rc, rp, yesNo(rc <= 1.0), yesNo(min(rc, rp, turboRatio(d.s)) <= 0.8))
	}
	if len(r.backup.refs) > 2 {
		t := r.backup.refs[2]
		w("\nBackup in pipe's fastest mode, %s (zstd level 1, so larger objects than level 3's): %s, %.2f× the shell pipeline.\n", t.label, median(t.times).Round(10*time.Millisecond), turboRatio(r.backup))
	}
	w("\nPeak memory (rusage: the largest process of the run, pipe's or a plugin's, and of the shell pipeline; a summed figure for pipe is in the memory scenario):\n\n| run | peak RSS |\n|---|---|\n")
	for _, d := range directions {
		for _, c := range append([]*contender{d.s.pipe}, d.s.refs...) {
			w("| %s, %s | %s |\n", d.name, strings.ReplaceAll(c.label, "|", `\|`), mib(c.maxRSS))
		}
	}
	w("\nCPU seconds per run (user + system of the client processes; the server's work is not counted): ")
	for _, d := range directions {
		for _, c := range append([]*contender{d.s.pipe}, d.s.refs...) {
			w("%s %s %.1f s; ", d.name, c.label, median(c.cpu).Seconds())
		}
	}
	w("\n")
}

const turboLabel = "pipe, turbo profile, custom format"

// turboRatio is the time ratio of the turbo-profile run to the shell
// pipeline's, when s has one (+Inf otherwise).
func turboRatio(s *scenarioResult) float64 {
	if len(s.refs) < 3 {
		return math.Inf(1)
	}
	return float64(median(s.refs[2].times)) / float64(median(s.refs[0].times))
}
