package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// The cluster scenario: every database of a PostgreSQL server backed up
// and restored in one pipe run, against the loop people script today.

type pgClusterResult struct {
	direct          bool // connected past docker-proxy
	cpus            int  // the machine's, which the containers share
	dbs             []string
	sizes           map[string]int64
	total           int64
	backup, restore *race
}

// pgClusterDBs are the scenario's databases: one large, seven small.
var pgClusterDBs = []string{"big", "crm", "billing", "shop", "hr", "wiki", "auth", "audit"}

func (b *bench) pgClusterScenario(ctx context.Context) (*pgClusterResult, error) {
	logf("scenario: a PostgreSQL server of %d databases through MinIO: pipe's cluster mode against a pg_dump | zstd | mc loop", len(pgClusterDBs))
	if err := needTools(lookPG, "Debian: postgresql-client, zstd", "pg_dump", "pg_restore", "zstd"); err != nil {
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
	res := &pgClusterResult{dbs: pgClusterDBs, sizes: map[string]int64{}, cpus: runtime.NumCPU()}
	minioDirect, pgDirect := m.direct(ctx), pg.direct(ctx)
	res.direct = minioDirect && pgDirect
	admin, err := pg.connect(ctx, "postgres")
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	rows, err := b.loadPGCluster(ctx, pg, admin, res)
	if err != nil {
		return nil, err
	}
	c, err := b.pgClusterRace(ctx, m, pg, admin, rows)
	if err != nil {
		return nil, err
	}
	c.bytes = res.total
	if res.backup, res.restore, err = b.clusterRaces(ctx, m, c); err != nil {
		return nil, err
	}
	return res, nil
}

// loadPGCluster creates the scenario's databases, each with the data
// set (the big one larger), and returns the rows of each; res gets their
// sizes.
func (b *bench) loadPGCluster(ctx context.Context, pg *pgServer, admin *pgx.Conn, res *pgClusterResult) (map[string]int64, error) {
	// Accounts in multiples of 100,000 (pgbench's branches), events.
	big, bigEvents, small, smallEvents := 2_000_000, 1_200_000, 100_000, 100_000
	if b.cfg.quick {
		big, bigEvents = 300_000, 200_000
	}
	rows := map[string]int64{}
	for _, db := range pgClusterDBs {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			return nil, err
		}
		accounts, events := small, smallEvents
		if db == "big" {
			accounts, events = big, bigEvents
		}
		d, err := pg.load(ctx, db, pgBenchDataset(accounts, events))
		if err != nil {
			return nil, err
		}
		rows[db], res.sizes[db] = d.rows, d.size
		res.total += d.size
	}
	logf("  %d databases loaded, %s in all", len(pgClusterDBs), mib(res.total))
	return rows, nil
}

// pgClusterRace is what the cluster races run: pipe's files (a pair with
// streams = 2: two databases at once on 2 CPUs, as the loop's -T2 gives
// zstd two threads; a second pair that reads and restores each database
// table by table, two tables at once), the loops, how a restore is
// undone and checked.
func (b *bench) pgClusterRace(ctx context.Context, m *minio, pg *pgServer, admin *pgx.Conn, rows map[string]int64) (clusterRace, error) {
	files := func(name, prefix, jobs string) (backup, restore string, err error) {
		backup, err = writePipeline(b.hcl, name+"_backup", fmt.Sprintf("  streams = 2\n  source \"postgres\" {\n%s    databases = [\"*\"]\n    exclude_databases = [%q]\n%s  }\n  compress {\n    codec   = \"zstd\"\n    level   = 3\n    workers = 2\n  }\n  sink \"s3\" {\n%s    key               = %q\n  }\n",
			pg.attrs(), pgDB, jobs, m.attrs(), prefix), "secret", "pgpass")
		if err == nil {
			restore, err = writePipeline(b.hcl, name+"_restore", fmt.Sprintf("  streams = 2\n  source \"s3\" {\n%s    prefix            = %q\n  }\n  decompress {}\n  sink \"postgres\" {\n%s    databases = [\"*\"]\n%s  }\n",
				m.attrs(), prefix, pg.attrs(), jobs), "secret", "pgpass")
		}
		return backup, restore, err
	}
	c := clusterRace{
		what:    fmt.Sprintf("%d databases", len(pgClusterDBs)),
		pipeEnv: []string{"PIPE_VAR_secret=" + minioSecret, "PIPE_VAR_pgpass=" + pgPassword},
		loopEnv: append(slices.Clone(pgEnvVars), m.mcEnv...),
		drop: func() {
			for _, db := range pgClusterDBs {
				_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			}
			_, _ = admin.Exec(ctx, "CHECKPOINT")
		},
		check:      func(ctx context.Context) error { return pgClusterRestored(ctx, pg, rows) },
		pipePrefix: "cluster/pipe/", loopPrefix: "cluster/loop/", jobsPrefix: "cluster/pipe-jobs/",
	}
	var err error
	if c.backupFile, c.restoreFile, err = files("cluster", c.pipePrefix, ""); err != nil {
		return c, err
	}
	if c.jobsBackupFile, c.jobsRestoreFile, err = files("cluster_jobs", c.jobsPrefix, "    jobs = 2\n"); err != nil {
		return c, err
	}
	list, mc := strings.Join(pgClusterDBs, " "), b.cfg.mc
	base := strings.TrimSuffix(pg.url("DB"), "/DB?sslmode=disable")
	c.backupLabel, c.backupLoop = "for db: pg_dump | zstd | mc pipe", fmt.Sprintf(
		`for db in %s; do pg_dump -Fc -Z0 --dbname="%s/$db?sslmode=disable" | zstd -q -3 -T2 | %q pipe "%s/%s/cluster/loop/$db.dump.zst"; done`,
		list, base, mc, mcAlias, s3Bucket)
	c.restoreLabel, c.restoreLoop = "for db: createdb; mc cat | zstd -d | pg_restore", fmt.Sprintf(
		`for db in %s; do psql -X -q --dbname="%s/postgres?sslmode=disable" -c "CREATE DATABASE $db" && %q cat "%s/%s/cluster/loop/$db.dump.zst" | zstd -q -d | pg_restore --exit-on-error --dbname="%s/$db?sslmode=disable"; done`,
		list, base, mc, mcAlias, s3Bucket, base)
	return c, nil
}

// pgClusterRestored checks each database's rows after a restore.
func pgClusterRestored(ctx context.Context, pg *pgServer, rows map[string]int64) error {
	for _, db := range pgClusterDBs {
		c, err := pg.connect(ctx, db)
		if err != nil {
			return fmt.Errorf("after the restore: %w", err)
		}
		var r int64
		err = c.QueryRow(ctx, "SELECT (SELECT count(*) FROM pgbench_accounts) + (SELECT count(*) FROM events)").Scan(&r)
		c.Close(context.Background())
		if err != nil || r != rows[db] {
			return fmt.Errorf("the restore of %s has %d rows (%v), want %d", db, r, err, rows[db])
		}
	}
	return nil
}

func (r *pgClusterResult) races() []*race { return []*race{r.backup, r.restore} }

func (r *pgClusterResult) markdown(w writer) {
	w("\n## PostgreSQL: a whole server through MinIO\n\n")
	var sizes []string
	for _, db := range r.dbs {
		sizes = append(sizes, fmt.Sprintf("%s %s", db, mib(r.sizes[db])))
	}
	w("PostgreSQL (%s container) and MinIO on the same %d-CPU machine; %d databases, %s in all (%s). pipe: one run, `databases = [\"*\"]`, two databases at once, zstd level 3 on 2 workers; its restore creates each database with pg_restore --create and applies globals.sql first. pipe table by table: the same with `jobs = 2` (each database read two tables at once on a snapshot of its own, restored two tables at once and `pg_restore --jobs 2` for its indexes). The reference: the loop people script, one database after another (`pg_dump -Fc -Z0 | zstd -3 -T2 | mc pipe`; `createdb` then `mc cat | zstd -d | pg_restore`). Each restore goes into a server without the databases (dropped untimed) and is checked database by database. %s Medians of interleaved runs; a time ratio below 1 means pipe is faster.\n\n",
		pgImage, r.cpus, len(r.dbs), mib(r.total), strings.Join(sizes, ", "), connectionNote(r.direct))
	clusterMarkdown(w, r.backup, r.restore)
}
