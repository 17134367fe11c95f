package main

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// The MariaDB cluster scenario: every database of a server in one pipe
// run, against a mariadb-dump loop.

type mysqlClusterResult struct {
	direct          bool // connected past docker-proxy
	cpus            int  // the machine's, which the containers share
	dbs             []string
	total           int64
	backup, restore *race
}

func (b *bench) mysqlClusterScenario(ctx context.Context) (*mysqlClusterResult, error) {
	logf("scenario: a MariaDB server of %d databases through MinIO: pipe's cluster mode against a mariadb-dump | zstd | mc loop", len(pgClusterDBs))
	if err := needTools(exec.LookPath, "Debian: mariadb-client, zstd", "mariadb-dump", "mariadb", "zstd"); err != nil {
		return nil, err
	}
	m, err := b.startMinIO(ctx, b.cfg.mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	db, err := startMariaDB(ctx, filepath.Join(b.hcl, "root.cnf"))
	if err != nil {
		return nil, err
	}
	defer db.stop()
	res := &mysqlClusterResult{dbs: pgClusterDBs, direct: m.direct(ctx) && db.direct, cpus: runtime.NumCPU()}
	rows, err := b.loadMySQLCluster(ctx, db, res)
	if err != nil {
		return nil, err
	}
	c, err := b.mysqlClusterRace(ctx, m, db, rows)
	if err != nil {
		return nil, err
	}
	c.bytes = res.total
	if res.backup, res.restore, err = b.clusterRaces(ctx, m, c); err != nil {
		return nil, err
	}
	return res, nil
}

// loadMySQLCluster creates the scenario's databases, an events table each
// (the big one larger), and returns the rows of each; res gets their
// total size, as the server estimates it.
func (b *bench) loadMySQLCluster(ctx context.Context, db *mariaServer, res *mysqlClusterResult) (map[string]string, error) {
	big, small := 2_000_000, 150_000
	if b.cfg.quick {
		big, small = 300_000, 30_000
	}
	rows := map[string]string{}
	for _, name := range pgClusterDBs {
		n := small
		if name == "big" {
			n = big
		}
		q := fmt.Sprintf("CREATE DATABASE %[1]s; CREATE TABLE %[1]s.events (id INT PRIMARY KEY, account INT NOT NULL, kind VARCHAR(16), amount DECIMAL(12,2), at DATETIME(6), note TEXT, KEY (account)) ENGINE=InnoDB;"+
			" INSERT INTO %[1]s.events SELECT seq, seq %% 100000, ELT(seq %% 4 + 1, 'deposit', 'withdrawal', 'transfer', 'fee'), (seq %% 100000) / 100, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq * 17 SECOND, IF(seq %% 5 = 0, NULL, CONCAT(MD5(seq), ' ', REPEAT(CHAR(97 + seq %% 26), seq %% 60))) FROM %[1]s.seq_1_to_%[2]d;", name, n)
		if _, err := db.sql(ctx, q); err != nil {
			return nil, fmt.Errorf("loading %s: %w", name, err)
		}
		var err error
		if rows[name], err = db.sql(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s.events", name)); err != nil {
			return nil, err
		}
	}
	out, err := db.sql(ctx, "SELECT IFNULL(SUM(data_length + index_length), 0) FROM information_schema.tables WHERE table_schema IN ('"+strings.Join(pgClusterDBs, "','")+"')")
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Sscan(out, &res.total); err != nil {
		return nil, fmt.Errorf("the databases' size: %q: %w", out, err)
	}
	logf("  %d databases loaded, %s in all (the server's estimate)", len(pgClusterDBs), mib(res.total))
	return rows, nil
}

// mysqlClusterRace is what the cluster races run: pipe's pair of files
// (streams = 2, as in the PostgreSQL scenario), the loops, how a restore
// is undone and checked.
func (b *bench) mysqlClusterRace(ctx context.Context, m *minio, db *mariaServer, rows map[string]string) (clusterRace, error) {
	conn := fmt.Sprintf("    host     = %q\n    port     = %s\n    user     = \"root\"\n    password = var.dbpass\n", db.host, db.port)
	c := clusterRace{
		what:       fmt.Sprintf("%d MariaDB databases", len(pgClusterDBs)),
		pipeEnv:    []string{"PIPE_VAR_secret=" + minioSecret, "PIPE_VAR_dbpass=" + mariadbPassword},
		loopEnv:    m.mcEnv,
		pipePrefix: "mcluster/pipe/", loopPrefix: "mcluster/loop/",
		drop: func() {
			for _, name := range pgClusterDBs {
				_, _ = db.sql(ctx, "DROP DATABASE IF EXISTS "+name)
			}
		},
		check: func(ctx context.Context) error {
			for _, name := range pgClusterDBs {
				n, err := db.sql(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s.events", name))
				if err != nil || n != rows[name] {
					return fmt.Errorf("the restore of %s has %s rows (%v), want %s", name, n, err, rows[name])
				}
			}
			return nil
		},
	}
	var err error
	c.backupFile, err = writePipeline(b.hcl, "mysql_cluster_backup", fmt.Sprintf("  streams = 2\n  source \"mysql\" {\n%s    databases = [\"*\"]\n    exclude_databases = [\"bench\"]\n  }\n  compress {\n    codec   = \"zstd\"\n    level   = 3\n    workers = 2\n  }\n  sink \"s3\" {\n%s    key               = \"mcluster/pipe/\"\n  }\n",
		conn, m.attrs()), "secret", "dbpass")
	if err != nil {
		return c, err
	}
	c.restoreFile, err = writePipeline(b.hcl, "mysql_cluster_restore", fmt.Sprintf("  streams = 2\n  source \"s3\" {\n%s    prefix            = \"mcluster/pipe/\"\n  }\n  decompress {}\n  sink \"mysql\" {\n%s    databases = [\"*\"]\n  }\n",
		m.attrs(), conn), "secret", "dbpass")
	if err != nil {
		return c, err
	}
	list, mc := strings.Join(pgClusterDBs, " "), b.cfg.mc
	c.backupLabel, c.backupLoop = "for db: mariadb-dump | zstd | mc pipe", fmt.Sprintf(
		`for db in %s; do mariadb-dump --defaults-extra-file=%q --single-transaction --quick --hex-blob --routines --triggers --databases "$db" | zstd -q -3 -T2 | %q pipe "%s/%s/mcluster/loop/$db.sql.zst"; done`,
		list, db.cnf, mc, mcAlias, s3Bucket)
	c.restoreLabel, c.restoreLoop = "for db: mc cat | zstd -d | mariadb", fmt.Sprintf(
		`for db in %s; do %q cat "%s/%s/mcluster/loop/$db.sql.zst" | zstd -q -d | mariadb --defaults-extra-file=%q; done`,
		list, mc, mcAlias, s3Bucket, db.cnf)
	return c, nil
}

func (r *mysqlClusterResult) races() []*race { return []*race{r.backup, r.restore} }

func (r *mysqlClusterResult) markdown(w writer) {
	w("\n## MariaDB: a whole server through MinIO\n\n")
	w("MariaDB (%s container) and MinIO on the same %d-CPU machine; %d databases of one events table each (one of 2,000,000 rows, seven of 150,000), %s in all as the server estimates it. pipe: one run, `databases = [\"*\"]`, two databases at once, zstd level 3 on 2 workers (its mariadb-dump writes rows in the binary character set; docs/databases.md says why). The reference: the loop people script, one database after another (`mariadb-dump --single-transaction --quick --hex-blob --databases | zstd -3 -T2 | mc pipe`; `mc cat | zstd -d | mariadb`). Each restore goes into a server without the databases (dropped untimed) and is checked database by database. %s Medians of interleaved runs; a time ratio below 1 means pipe is faster.\n\n",
		mariadbImage, r.cpus, len(r.dbs), mib(r.total), connectionNote(r.direct))
	clusterMarkdown(w, r.backup, r.restore)
}
