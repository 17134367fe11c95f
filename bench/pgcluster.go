package main

import (
	"context"
	"fmt"
	"runtime"
	"strings"
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
	mc := b.cfg.mc
	logf("scenario: a PostgreSQL server of %d databases through MinIO: pipe's cluster mode against a pg_dump | zstd | mc loop", len(pgClusterDBs))
	for _, tool := range []string{"pg_dump", "pg_restore", "zstd"} {
		if _, err := lookPG(tool); err != nil {
			return nil, fmt.Errorf("the cluster benchmark needs %s (Debian: postgresql-client, zstd)", tool)
		}
	}
	m, err := b.startMinIO(ctx, mc)
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
	// Accounts in multiples of 100,000 (pgbench's branches), events.
	big, bigEvents, small, smallEvents := 2_000_000, 1_200_000, 100_000, 100_000
	if b.cfg.quick {
		big, bigEvents = 300_000, 200_000
	}
	admin, err := pg.connect(ctx, "postgres")
	if err != nil {
		return nil, err
	}
	defer admin.Close(context.Background())
	rows := map[string]int64{}
	for _, db := range pgClusterDBs {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
			return nil, err
		}
		accounts, events := small, smallEvents
		if db == "big" {
			accounts, events = big, bigEvents
		}
		c, err := pg.connect(ctx, db)
		if err != nil {
			return nil, err
		}
		for _, q := range pgBenchDataset(accounts, events) {
			if _, err = c.Exec(ctx, q); err != nil {
				err = fmt.Errorf("loading %s: %w", db, err)
				break
			}
		}
		var n, size int64
		if err == nil {
			err = c.QueryRow(ctx, "SELECT (SELECT count(*) FROM pgbench_accounts) + (SELECT count(*) FROM events), pg_database_size(current_database())").Scan(&n, &size)
		}
		c.Close(context.Background())
		if err != nil {
			return nil, err
		}
		rows[db], res.sizes[db] = n, size
		res.total += size
	}
	logf("  %d databases loaded, %s in all", len(pgClusterDBs), mib(res.total))

	s3 := m.attrs()
	pgConn := fmt.Sprintf("    host     = %q\n    port     = %s\n    user     = %q\n    password = var.pgpass\n    sslmode  = \"disable\"\n", pg.host, pg.port, pgUser)
	pipeEnv := []string{"PIPE_VAR_secret=" + minioSecret, "PIPE_VAR_pgpass=" + pgPassword}
	// streams = 2: two databases at once on 2 CPUs, as the loop's -T2
	// gives zstd two threads. The second pair reads and restores each
	// database table by table, two tables at once.
	files := func(name, prefix, jobs string) (backup, restore string, err error) {
		backup, err = writePipeline(b.hcl, name+"_backup", fmt.Sprintf("  streams = 2\n  source \"postgres\" {\n%s    databases = [\"*\"]\n    exclude_databases = [%q]\n%s  }\n  compress {\n    codec   = \"zstd\"\n    level   = 3\n    workers = 2\n  }\n  sink \"s3\" {\n%s    key               = %q\n  }\n",
			pgConn, pgDB, jobs, s3, prefix), "secret", "pgpass")
		if err == nil {
			restore, err = writePipeline(b.hcl, name+"_restore", fmt.Sprintf("  streams = 2\n  source \"s3\" {\n%s    prefix            = %q\n  }\n  decompress {}\n  sink \"postgres\" {\n%s    databases = [\"*\"]\n%s  }\n",
				s3, prefix, pgConn, jobs), "secret", "pgpass")
		}
		return backup, restore, err
	}
	const pipePrefix, jobsPrefix = "cluster/pipe/", "cluster/pipe-jobs/"
	fBackup, fRestore, err := files("cluster", pipePrefix, "")
	if err != nil {
		return nil, err
	}
	fJobsBackup, fJobsRestore, err := files("cluster_jobs", jobsPrefix, "    jobs = 2\n")
	if err != nil {
		return nil, err
	}
	list := strings.Join(pgClusterDBs, " ")
	base := strings.TrimSuffix(pg.url("DB"), "/DB?sslmode=disable")
	res.backup, res.restore, err = b.clusterRaces(ctx, m, mc, clusterRace{
		what: fmt.Sprintf("%d databases", len(pgClusterDBs)), bytes: res.total,
		pipeEnv: pipeEnv, loopEnv: append(append([]string{}, pgEnvVars...), m.mcEnv...),
		backupFile: fBackup, restoreFile: fRestore,
		backupLabel: "for db: pg_dump | zstd | mc pipe", backupLoop: fmt.Sprintf(
			`for db in %s; do pg_dump -Fc -Z0 --dbname="%s/$db?sslmode=disable" | zstd -q -3 -T2 | %q pipe "%s/%s/cluster/loop/$db.dump.zst"; done`,
			list, base, mc, mcAlias, s3Bucket),
		restoreLabel: "for db: createdb; mc cat | zstd -d | pg_restore", restoreLoop: fmt.Sprintf(
			`for db in %s; do psql -X -q --dbname="%s/postgres?sslmode=disable" -c "CREATE DATABASE $db" && %q cat "%s/%s/cluster/loop/$db.dump.zst" | zstd -q -d | pg_restore --exit-on-error --dbname="%s/$db?sslmode=disable"; done`,
			list, base, mc, mcAlias, s3Bucket, base),
		pipePrefix: pipePrefix, loopPrefix: "cluster/loop/",
		jobsBackupFile: fJobsBackup, jobsRestoreFile: fJobsRestore, jobsPrefix: jobsPrefix,
		drop: func() {
			for _, db := range pgClusterDBs {
				_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			}
			_, _ = admin.Exec(ctx, "CHECKPOINT")
		},
		check: func(ctx context.Context) error {
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
		},
	})
	if err != nil {
		return nil, err
	}
	return res, nil
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
