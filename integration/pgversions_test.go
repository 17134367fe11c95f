package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// pgVersion is a PostgreSQL image the version test runs every feature on.
type pgVersion struct {
	major   string
	image   string
	dataDir string // PGDATA, as the official image sets it
	target  string // ../shared/testimages/build.sh's target ("": a default image)
}

// pgVersions are the versions TestPostgresVersions covers: the oldest
// and the newest pipe supports, and every one between that has an image
// (Debian ships no 14 or 16). 15, the version of the host's client
// tools, also runs every other test.
var pgVersions = []pgVersion{
	{"13", "postgres:13", "/var/lib/postgresql/data", "postgres-13"},
	{"15", "postgres:15", "/var/lib/postgresql/data", ""},
	{"17", "postgres:17", "/var/lib/postgresql/data", "postgres-17"},
	{"18", "postgres:18", "/var/lib/postgresql/18/docker", "postgres-18"},
}

var (
	staticOnce sync.Once
	staticBin  string
	staticErr  error
)

// staticPipe is pipe built without cgo: unlike pipeBin, built against
// this host's C library, it runs in every image (postgres:13 is Debian
// bullseye, whose glibc is older than bookworm's).
func staticPipe(t *testing.T) string {
	t.Helper()
	staticOnce.Do(func() {
		staticBin = filepath.Join(filepath.Dir(pipeBin), "pipe-static")
		build := exec.Command("go", "build", "-o", staticBin, "../cmd/pipe")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			staticErr = fmt.Errorf("building a static pipe: %v\n%s", err, out)
		}
	})
	if staticErr != nil {
		t.Fatal(staticErr)
	}
	return staticBin
}

// startVersionCluster starts v's image as startWALCluster does postgres:15
// (1 MiB segments, pipe wal push as archive_command, MinIO on the Docker
// network), with the static pipe. An image that is not here fails the
// test in CI; elsewhere, one that cannot be pulled either skips it.
func startVersionCluster(t *testing.T, v pgVersion, env map[string]string, keys string) *walCluster {
	t.Helper()
	image := requireImage(t, v.image, v.target)
	ctx := context.Background()
	env["POSTGRES_INITDB_ARGS"] = "--wal-segsize=1"
	env["PIPE_VAR_pg_password"] = pgPassword
	c, err := tcpostgres.Run(ctx, image, tcpostgres.WithDatabase("app"), tcpostgres.WithUsername("pipe"),
		tcpostgres.WithPassword(pgPassword), tcpostgres.BasicWaitStrategies(),
		testcontainers.WithEnv(env),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{HostFilePath: staticPipe(t), ContainerFilePath: "/usr/local/bin/pipe", FileMode: 0o755},
			testcontainers.ContainerFile{Reader: strings.NewReader(strings.Replace(walFile, "ASYNC", "false", 1)), ContainerFilePath: "/etc/pipe/pg.hcl", FileMode: 0o644},
			testcontainers.ContainerFile{Reader: strings.NewReader(versionPipelines), ContainerFilePath: "/etc/pipe/dump.hcl", FileMode: 0o644},
			testcontainers.ContainerFile{Reader: strings.NewReader(versionFingerprintSQL), ContainerFilePath: "/etc/pipe/fingerprint.sql", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: filepath.Join(keys, "wal.pub"), ContainerFilePath: "/etc/pipe/wal.pub", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: filepath.Join(keys, "wal.key"), ContainerFilePath: "/etc/pipe/wal.key", FileMode: 0o644},
		),
		testcontainers.WithCmdArgs("-c", "archive_mode=on", "-c", "archive_command="+archiveCommand[false],
			"-c", "wal_keep_size=4GB", "-c", "max_wal_size=4GB"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.ShmSize = 256 << 20 }))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		startFailed(t, image, v.target, err)
	}
	return &walCluster{name: "postgres " + v.major, c: c, dir: v.dataDir}
}

// versionPipelines are the logical backups and restores, run inside the
// container with its own pg_dump, pg_restore and psql: one database as
// one stream (custom or plain) or table by table (jobs), and the whole
// server. The store and the keys are the archive's.
var versionPipelines = s3Vars + `
variable "pg_password" { sensitive = true }
variable "jobs" { default = 1 }
variable "format" { default = "custom" }
variable "globals" { default = false }
variable "set" { default = "custom" }
variable "target" { default = "restored" }

pipeline "backup" {
  source "postgres" {
    host     = "127.0.0.1"
    user     = "pipe"
    password = var.pg_password
    database = "app"
    sslmode  = "disable"
    format   = var.format
    jobs     = var.jobs
    globals  = var.globals
  }
  compress {}
  encrypt { recipients = [file("/etc/pipe/wal.pub")] }
  ` + s3Block("sink", `key = "dump/${var.set}/${run.id}/"`) + `
}

pipeline "restore" {
  ` + s3Block("source", `prefix = "dump/${var.set}/"`) + `
  decrypt { identities = [file("/etc/pipe/wal.key")] }
  decompress {}
  sink "postgres" {
    dsn      = "postgres://pipe@127.0.0.1:5432/${var.target}?sslmode=disable"
    password = var.pg_password
    create   = true
    jobs     = var.jobs
    globals  = var.globals
  }
}

pipeline "server" {
  source "postgres" {
    host              = "127.0.0.1"
    user              = "pipe"
    password          = var.pg_password
    sslmode           = "disable"
    databases         = ["*"]
    exclude_databases = ["restored_*"]
  }
  compress {}
  encrypt { recipients = [file("/etc/pipe/wal.pub")] }
  ` + s3Block("sink", `key = "server/${run.id}/"`) + `
}

pipeline "server_restore" {
  ` + s3Block("source", `prefix = "server/"`) + `
  decrypt { identities = [file("/etc/pipe/wal.key")] }
  decompress {}
  sink "postgres" {
    host      = "127.0.0.1"
    user      = "pipe"
    password  = var.pg_password
    sslmode   = "disable"
    databases = ["*"]
    clean     = true
  }
}
`

// versionDataset is what a restore must carry, small: rows of many types,
// an identity and a generated column, a partitioned table, foreign keys,
// indexes, a view, a materialized view, a trigger, a sequence in use,
// identifiers that need quoting, and a table in a tablespace.
var versionDataset = []string{
	`CREATE TABLE accounts (id int PRIMARY KEY, owner text NOT NULL, balance numeric(12,2))`,
	`INSERT INTO accounts SELECT g, 'owner ' || g, g * 1.5 FROM generate_series(1, 20000) g`,
	`CREATE TABLE events (id bigserial PRIMARY KEY, account int NOT NULL REFERENCES accounts, kind text NOT NULL,
		amount numeric(12,2), at timestamptz NOT NULL, payload jsonb, note text)`,
	`INSERT INTO events (account, kind, amount, at, payload, note)
		SELECT i % 20000 + 1, (ARRAY['deposit','withdrawal','transfer','fee'])[i % 4 + 1], (i % 100000) / 100.0,
			timestamptz '2026-01-01 00:00:00+00' + i * interval '17 seconds', jsonb_build_object('i', i, 'ok', i % 3 = 0),
			CASE WHEN i % 5 = 0 THEN NULL ELSE md5(i::text) || E'\ttab\\back\nnewline ü' END
		FROM generate_series(1, 50000) i`,
	`CREATE INDEX events_at ON events (at)`,
	`CREATE SCHEMA "Odd Schema"`,
	`CREATE TABLE "Odd Schema"."Mixed.Case/Table" (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "Value" text, doubled int GENERATED ALWAYS AS (id * 2) STORED)`,
	`INSERT INTO "Odd Schema"."Mixed.Case/Table" ("Value") SELECT 'v' || g FROM generate_series(1, 1000) g`,
	`CREATE TABLE measurements (at date NOT NULL, v double precision) PARTITION BY RANGE (at)`,
	`CREATE TABLE measurements_2025 PARTITION OF measurements FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`,
	`CREATE TABLE measurements_2026 PARTITION OF measurements FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`,
	`INSERT INTO measurements SELECT date '2025-01-01' + g % 700, g / 3.0 FROM generate_series(1, 20000) g`,
	`CREATE VIEW account_totals AS SELECT account, sum(amount) AS total FROM events GROUP BY account`,
	`CREATE MATERIALIZED VIEW kind_counts AS SELECT kind, count(*) FROM events GROUP BY kind`,
	`CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.note := coalesce(NEW.note, '') || '!'; RETURN NEW; END $$`,
	`CREATE TRIGGER events_touch BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION touch()`,
	`CREATE SEQUENCE invoice_numbers START 1000`,
	`SELECT nextval('invoice_numbers') FROM generate_series(1, 42)`,
	`CREATE TABLESPACE ts LOCATION '/tmp/ts'`,
	`CREATE TABLE spaced (n int, note text) TABLESPACE ts`,
	`INSERT INTO spaced SELECT g, md5(g::text) FROM generate_series(1, 5000) g`,
	`ANALYZE`,
}

// versionFingerprintSQL prints each table's row count and a hash of its
// rows in order, and each sequence's state: equal databases print the
// same.
const versionFingerprintSQL = `
SELECT c.oid::regclass || ' ' || (xpath('/row/f/text()', query_to_xml(
    CASE c.relkind
      WHEN 'S' THEN format('SELECT last_value || '' '' || is_called AS f FROM %s', c.oid::regclass)
      ELSE format('SELECT count(*) || '' '' || coalesce(md5(string_agg(x::text, E''\n'' ORDER BY x::text)), '''') AS f FROM %s x', c.oid::regclass)
    END, false, true, '')))[1]::text
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'S', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%'
ORDER BY 1;
`

// psqlIn runs sql in database db of the server on port 5432.
func (w *walCluster) psqlIn(t *testing.T, db, sql string) string {
	t.Helper()
	return strings.TrimSpace(w.mustSh(t, fmt.Sprintf("psql -X -A -t -v ON_ERROR_STOP=1 -h /var/run/postgresql -U pipe -d %s -c %q", db, sql)))
}

// fingerprint describes database db so that two equal ones match: its
// schema as the server's own pg_dump prints it, and versionFingerprintSQL.
func (w *walCluster) fingerprint(t *testing.T, db string) string {
	t.Helper()
	var b strings.Builder
	for _, line := range strings.SplitAfter(w.mustSh(t, "pg_dump -h /var/run/postgresql -U pipe --schema-only -d "+db), "\n") {
		// pg_dump's \restrict key is random per dump; this build gives
		// identity columns a pg_attver option new at every creation.
		if !strings.HasPrefix(line, `\restrict `) && !strings.HasPrefix(line, `\unrestrict `) {
			b.WriteString(attver.ReplaceAllString(line, "pg_attver=N"))
		}
	}
	b.WriteString(w.mustSh(t, "psql -X -A -t -v ON_ERROR_STOP=1 -h /var/run/postgresql -U pipe -d "+db+" -f /etc/pipe/fingerprint.sql"))
	return b.String()
}

// TestPostgresVersions runs every PostgreSQL feature of pipe on each
// version of pgVersions, with that version's own tools inside its
// container: logical backups restored into new databases (one stream
// custom with globals, plain, table by table with jobs = 4) and a whole
// server restored over itself, each equal to the original; WAL archived
// by pipe wal push as archive_command; a base backup over the
// replication protocol (13's: one COPY per tablespace, then the manifest)
// whose restore pg_verifybackup accepts; and recoveries through pipe wal
// fetch to a time, an xid, an LSN, a restore point and along the newest
// timeline after a promotion.
func TestPostgresVersions(t *testing.T) {
	requireDocker(t)
	b := newS3Bench(t)
	keys := t.TempDir()
	mustPipe(t, keys, nil, "keygen", "-o", "wal")
	for _, v := range pgVersions {
		t.Run(v.major, func(t *testing.T) {
			start := time.Now()
			testPostgresVersion(t, b, keys, v)
			t.Logf("PostgreSQL %s: every feature in %s", v.major, time.Since(start).Round(time.Second))
		})
	}
}

func testPostgresVersion(t *testing.T, b *s3Bench, keys string, v pgVersion) {
	bucket := b.bucket(t, "pg"+v.major)
	pg := startVersionCluster(t, v, b.inside(bucket), keys)
	ctx := context.Background()
	if got := pg.psql(t, 5432, "SHOW server_version_num"); !strings.HasPrefix(got, v.major) {
		t.Fatalf("%s runs server_version_num %s", v.image, got)
	}
	// md5 takes SCRAM passwords too, and 13's md5 ones.
	pg.mustSh(t, `echo "host replication all all md5" >> pg_hba.conf && mkdir -m 700 /tmp/ts`)
	pg.psql(t, 5432, "SELECT pg_reload_conf()")
	pg.psql(t, 5432, "CREATE DATABASE crm")
	pg.psqlIn(t, "crm", "CREATE TABLE items AS SELECT g AS id, md5(g::text) AS name FROM generate_series(1, 3000) g")
	if err := pg.c.CopyToContainer(ctx, []byte(strings.Join(versionDataset, ";\n")+";\n"), "/etc/pipe/dataset.sql", 0o644); err != nil {
		t.Fatal(err)
	}
	pg.mustSh(t, "psql -X -q -v ON_ERROR_STOP=1 -h /var/run/postgresql -U pipe -d app -f /etc/pipe/dataset.sql")
	want := pg.fingerprint(t, "app")

	// Logical backups, each restored into a new database.
	dump := func(pipeline string, vars ...string) {
		t.Helper()
		pg.mustSh(t, "cd /etc/pipe && "+strings.Join(vars, " ")+" pipe run dump.hcl --pipeline "+pipeline)
	}
	for _, tc := range []struct {
		set  string
		vars []string
	}{
		{"custom", []string{"PIPE_VAR_globals=true"}},
		{"plain", []string{"PIPE_VAR_format=plain"}},
		{"parallel", []string{"PIPE_VAR_jobs=4"}},
	} {
		start := time.Now()
		vars := append([]string{"PIPE_VAR_set=" + tc.set, "PIPE_VAR_target=restored_" + tc.set}, tc.vars...)
		dump("backup", vars...)
		dump("restore", vars...)
		if got := pg.fingerprint(t, "restored_"+tc.set); got != want {
			t.Errorf("%s: the restored database differs from the original:\n%s", tc.set, firstDiff(want, got))
		}
		t.Logf("logical %s: backup and restore in %s", tc.set, time.Since(start).Round(time.Millisecond))
	}
	m := b.readManifest(t, bucket, "dump/custom/")
	if !strings.HasPrefix(m.Source["server_version"], v.major+".") || !strings.Contains(m.Source["pg_dump"], "(PostgreSQL) "+v.major+".") {
		t.Errorf("the dump's manifest records server %q, pg_dump %q", m.Source["server_version"], m.Source["pg_dump"])
	}
	// The whole server, restored over itself (clean = true drops each
	// database first): every database comes back equal.
	start := time.Now()
	wantCRM := pg.fingerprint(t, "crm")
	dump("server")
	dump("server_restore")
	if got := pg.fingerprint(t, "app"); got != want {
		t.Errorf("the server's app database differs after its restore:\n%s", firstDiff(want, got))
	}
	if got := pg.fingerprint(t, "crm"); got != wantCRM {
		t.Errorf("the server's crm database differs after its restore:\n%s", firstDiff(wantCRM, got))
	}
	t.Logf("whole server: backup and restore in %s", time.Since(start).Round(time.Millisecond))

	// A base backup from the host, over the mapped port.
	port, err := pg.c.MappedPort(ctx, "5432/tcp")
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	writeFile(t, filepath.Join(host, "base.hcl"), []byte(strings.Replace(walFile, "ASYNC", "false", 1)+baseBackupFile))
	env := b.env(bucket, b.m.Endpoint, "PIPE_VAR_keys="+keys,
		fmt.Sprintf("PIPE_VAR_pg_dsn=postgres://pipe:%s@localhost:%s/app?sslmode=disable", pgPassword, port.Port()))
	start = time.Now()
	mustPipe(t, host, env, "run", "base.hcl")
	t.Logf("base backup in %s", time.Since(start).Round(time.Millisecond))
	// The backup ended only once the server had archived its last
	// segment (pipe watches pg_stat_archiver from 15 on, the server
	// waits on 13 and 14): its WAL is in the archive already.
	if r := mustPipe(t, host, env, "verify", "base.hcl"); !strings.Contains(r.Stdout, "all archived") {
		t.Errorf("right after the base backup, its WAL is not all archived:\n%s", r.Stdout)
	}
	m = b.readManifest(t, bucket, "base/")
	tsOID := pg.psql(t, 5432, "SELECT oid FROM pg_tablespace WHERE spcname = 'ts'")
	streams := map[string]bool{}
	for _, o := range m.Objects {
		streams[o.Stream] = true
	}
	if !strings.HasPrefix(m.Source["server_version"], v.major+".") || m.Source["stop_lsn"] == "" || !streams["base.tar"] || !streams["backup_manifest"] || !streams[tsOID+".tar"] {
		t.Errorf("the base backup stored %v with facts %v", streams, m.Source)
	}

	// Marks after the backup, each a target: a time, an xid, an LSN, a
	// restore point.
	marks := func(port int) string {
		return pg.psql(t, port, "SELECT string_agg(note, ',' ORDER BY n) FROM marks")
	}
	pg.psql(t, 5432, "CREATE TABLE marks (n serial, note text)")
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('one')")
	time.Sleep(1500 * time.Millisecond)
	atTime := pg.psql(t, 5432, "SELECT clock_timestamp()::text")
	time.Sleep(1500 * time.Millisecond)
	atXID := pg.psql(t, 5432, "WITH i AS (INSERT INTO marks (note) VALUES ('two') RETURNING xmin) SELECT xmin FROM i")
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('three')")
	atLSN := pg.psql(t, 5432, "SELECT pg_current_wal_lsn()")
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('four')")
	pg.psql(t, 5432, "SELECT pg_create_restore_point('pipe-restore-point')")
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('five')")
	pg.archivedThrough(t)
	if r := mustPipe(t, host, env, "verify", "base.hcl"); !strings.Contains(r.Stdout, "all archived") {
		t.Errorf("verify did not find the base backup's WAL archived:\n%s", r.Stdout)
	}

	restore := func(name, settings string) string {
		t.Helper()
		dir := "/tmp/pitr-" + name
		if err := pg.c.CopyToContainer(ctx, []byte(pitrFile(dir, settings)), "/etc/pipe/"+name+".hcl", 0o644); err != nil {
			t.Fatal(err)
		}
		pg.mustSh(t, "pipe run /etc/pipe/"+name+".hcl")
		return dir
	}
	stop := func(dir string) { pg.mustSh(t, "pg_ctl -D "+dir+" -m fast -w stop") }

	// Each target on timeline 1, promoted; the time target's server
	// archives its new timeline, which the last recovery follows.
	for i, tc := range []struct{ name, settings, want string }{
		{"xid", fmt.Sprintf("recovery_target_xid = %q", atXID), "one,two"},
		{"lsn", fmt.Sprintf("recovery_target_lsn = %q", atLSN), "one,two,three"},
		{"name", `recovery_target_name = "pipe-restore-point"`, "one,two,three,four"},
		{"time", fmt.Sprintf("recovery_target_time = %q", atTime), "one"},
	} {
		start := time.Now()
		dir := restore(tc.name, tc.settings+"\n    recovery_target_action = \"promote\"")
		if tc.name == "name" {
			// Every file is the server's: its own backup manifest says so.
			if code, out := pg.sh(t, "pg_verifybackup --no-parse-wal --ignore=tablespace_map "+dir); code != 0 || !strings.Contains(out, "successfully verified") {
				t.Errorf("pg_verifybackup of the restored data directory: exit %d\n%s", code, out)
			}
		}
		conf := ""
		if tc.name == "time" {
			conf = `"archive_mode = on" "archive_command = 'pipe wal push /etc/pipe/pg.hcl %p'"`
		}
		port := 5441 + i
		pg.startRestored(t, dir, port, conf)
		if got := marks(port); got != tc.want {
			t.Errorf("recovered to the %s target: marks holds %q, want %q\n%s", tc.name, got, tc.want, lastLines(pg.mustSh(t, "cat "+dir+".log"), 20))
		}
		if tc.name == "time" {
			if tli := pg.psql(t, port, "SELECT timeline_id FROM pg_control_checkpoint()"); tli == "1" {
				t.Errorf("the promoted server is on timeline %s", tli)
			}
			pg.psql(t, port, "INSERT INTO marks (note) VALUES ('new timeline')")
			pg.archivedOn(t, port, func() string { return pg.mustSh(t, "tail -40 "+dir+".log") })
		} else if got := pg.psql(t, port, "SELECT count(*) FROM spaced"); got != "5000" {
			t.Errorf("recovered to the %s target: the table in the tablespace holds %s rows", tc.name, got)
		}
		stop(dir)
		t.Logf("recovery to the %s target in %s", tc.name, time.Since(start).Round(time.Millisecond))
	}
	dir := restore("latest", "")
	pg.startRestored(t, dir, 5449, "")
	if got := marks(5449); got != "one,new timeline" {
		t.Errorf("recovered along the latest timeline: marks holds %q, want 'one,new timeline'", got)
	}
	stop(dir)
}
