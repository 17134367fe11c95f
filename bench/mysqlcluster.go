package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/testcontainers/testcontainers-go"
	tcmariadb "github.com/testcontainers/testcontainers-go/modules/mariadb"
)

// The MariaDB cluster scenario: every database of a server in one pipe
// run, against a mariadb-dump loop.

const (
	mariadbImage    = "mariadb:10.11"
	mariadbPassword = "bench-maria-secret-42"
)

type mysqlClusterResult struct {
	direct          bool // connected past docker-proxy
	cpus            int  // the machine's, which the containers share
	dbs             []string
	total           int64
	backup, restore *race
}

func (b *bench) mysqlClusterScenario(ctx context.Context) (*mysqlClusterResult, error) {
	mc := b.cfg.mc
	logf("scenario: a MariaDB server of %d databases through MinIO: pipe's cluster mode against a mariadb-dump | zstd | mc loop", len(pgClusterDBs))
	for _, tool := range []string{"mariadb-dump", "mariadb", "zstd"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("the MariaDB cluster benchmark needs %s (Debian: mariadb-client, zstd)", tool)
		}
	}
	m, err := b.startMinIO(ctx, mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	c, err := tcmariadb.Run(ctx, mariadbImage, tcmariadb.WithDatabase("bench"), tcmariadb.WithUsername("root"), tcmariadb.WithPassword(mariadbPassword))
	if c != nil {
		defer func() { _ = testcontainers.TerminateContainer(c) }()
	}
	if err != nil {
		return nil, fmt.Errorf("starting MariaDB (docker and ../shared/testimages/build.sh): %w", err)
	}
	host, err := c.Host(ctx)
	if err != nil {
		return nil, err
	}
	mapped, err := c.MappedPort(ctx, "3306/tcp")
	if err != nil {
		return nil, err
	}
	port := mapped.Port()
	minioDirect := m.direct(ctx)
	dHost, dPort, dbDirect := directAddr(ctx, c, "3306/tcp")
	if dbDirect {
		host, port = dHost, dPort
	}
	cnf := filepath.Join(b.hcl, "root.cnf")
	if err := os.WriteFile(cnf, fmt.Appendf(nil, "[client]\nuser=root\npassword=%q\nhost=%s\nport=%s\nprotocol=tcp\n", mariadbPassword, host, port), 0o600); err != nil {
		return nil, err
	}
	sql := func(ctx context.Context, q string) (string, error) {
		cmd := exec.CommandContext(ctx, "mariadb", "--defaults-extra-file="+cnf, "--batch", "--skip-column-names")
		cmd.Stdin = strings.NewReader(q)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%v: %s", err, errb.String())
		}
		return strings.TrimSpace(out.String()), nil
	}
	big, small := 2_000_000, 150_000
	if b.cfg.quick {
		big, small = 300_000, 30_000
	}
	res := &mysqlClusterResult{dbs: pgClusterDBs, direct: minioDirect && dbDirect, cpus: runtime.NumCPU()}
	rows := map[string]string{}
	for _, db := range pgClusterDBs {
		n := small
		if db == "big" {
			n = big
		}
		q := fmt.Sprintf("CREATE DATABASE %[1]s; CREATE TABLE %[1]s.events (id INT PRIMARY KEY, account INT NOT NULL, kind VARCHAR(16), amount DECIMAL(12,2), at DATETIME(6), note TEXT, KEY (account)) ENGINE=InnoDB;"+
			" INSERT INTO %[1]s.events SELECT seq, seq %% 100000, ELT(seq %% 4 + 1, 'deposit', 'withdrawal', 'transfer', 'fee'), (seq %% 100000) / 100, TIMESTAMP '2026-01-01 00:00:00' + INTERVAL seq * 17 SECOND, IF(seq %% 5 = 0, NULL, CONCAT(MD5(seq), ' ', REPEAT(CHAR(97 + seq %% 26), seq %% 60))) FROM %[1]s.seq_1_to_%[2]d;", db, n)
		if _, err := sql(ctx, q); err != nil {
			return nil, fmt.Errorf("loading %s: %w", db, err)
		}
		if rows[db], err = sql(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s.events", db)); err != nil {
			return nil, err
		}
	}
	out, err := sql(ctx, "SELECT IFNULL(SUM(data_length + index_length), 0) FROM information_schema.tables WHERE table_schema IN ('"+strings.Join(pgClusterDBs, "','")+"')")
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Sscan(out, &res.total); err != nil {
		return nil, fmt.Errorf("the databases' size: %q: %w", out, err)
	}
	logf("  %d databases loaded, %s in all (the server's estimate)", len(pgClusterDBs), mib(res.total))

	s3 := m.attrs()
	conn := fmt.Sprintf("    host     = %q\n    port     = %s\n    user     = \"root\"\n    password = var.dbpass\n", host, port)
	pipeEnv := []string{"PIPE_VAR_secret=" + minioSecret, "PIPE_VAR_dbpass=" + mariadbPassword}
	fBackup, err := writePipeline(b.hcl, "mysql_cluster_backup", fmt.Sprintf("  streams = 2\n  source \"mysql\" {\n%s    databases = [\"*\"]\n    exclude_databases = [\"bench\"]\n  }\n  compress {\n    codec   = \"zstd\"\n    level   = 3\n    workers = 2\n  }\n  sink \"s3\" {\n%s    key               = \"mcluster/pipe/\"\n  }\n",
		conn, s3), "secret", "dbpass")
	if err != nil {
		return nil, err
	}
	fRestore, err := writePipeline(b.hcl, "mysql_cluster_restore", fmt.Sprintf("  streams = 2\n  source \"s3\" {\n%s    prefix            = \"mcluster/pipe/\"\n  }\n  decompress {}\n  sink \"mysql\" {\n%s    databases = [\"*\"]\n  }\n",
		s3, conn), "secret", "dbpass")
	if err != nil {
		return nil, err
	}
	list := strings.Join(pgClusterDBs, " ")
	res.backup, res.restore, err = b.clusterRaces(ctx, m, mc, clusterRace{
		what: fmt.Sprintf("%d MariaDB databases", len(pgClusterDBs)), bytes: res.total,
		pipeEnv: pipeEnv, loopEnv: m.mcEnv,
		backupFile: fBackup, restoreFile: fRestore,
		backupLabel: "for db: mariadb-dump | zstd | mc pipe", backupLoop: fmt.Sprintf(
			`for db in %s; do mariadb-dump --defaults-extra-file=%q --single-transaction --quick --hex-blob --routines --triggers --databases "$db" | zstd -q -3 -T2 | %q pipe "%s/%s/mcluster/loop/$db.sql.zst"; done`,
			list, cnf, mc, mcAlias, s3Bucket),
		restoreLabel: "for db: mc cat | zstd -d | mariadb", restoreLoop: fmt.Sprintf(
			`for db in %s; do %q cat "%s/%s/mcluster/loop/$db.sql.zst" | zstd -q -d | mariadb --defaults-extra-file=%q; done`,
			list, mc, mcAlias, s3Bucket, cnf),
		pipePrefix: "mcluster/pipe/", loopPrefix: "mcluster/loop/",
		drop: func() {
			for _, db := range pgClusterDBs {
				_, _ = sql(ctx, "DROP DATABASE IF EXISTS "+db)
			}
		},
		check: func(ctx context.Context) error {
			for _, db := range pgClusterDBs {
				n, err := sql(ctx, fmt.Sprintf("SELECT COUNT(*) FROM %s.events", db))
				if err != nil || n != rows[db] {
					return fmt.Errorf("the restore of %s has %s rows (%v), want %s", db, n, err, rows[db])
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

func (r *mysqlClusterResult) races() []*race { return []*race{r.backup, r.restore} }

func (r *mysqlClusterResult) markdown(w writer) {
	w("\n## MariaDB: a whole server through MinIO\n\n")
	w("MariaDB (%s container) and MinIO on the same %d-CPU machine; %d databases of one events table each (one of 2,000,000 rows, seven of 150,000), %s in all as the server estimates it. pipe: one run, `databases = [\"*\"]`, two databases at once, zstd level 3 on 2 workers (its mariadb-dump writes rows in the binary character set; docs/databases.md says why). The reference: the loop people script, one database after another (`mariadb-dump --single-transaction --quick --hex-blob --databases | zstd -3 -T2 | mc pipe`; `mc cat | zstd -d | mariadb`). Each restore goes into a server without the databases (dropped untimed) and is checked database by database. %s Medians of interleaved runs; a time ratio below 1 means pipe is faster.\n\n",
		mariadbImage, r.cpus, len(r.dbs), mib(r.total), connectionNote(r.direct))
	clusterMarkdown(w, r.backup, r.restore)
}
