package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/pipebackup/pipe/pipefile"
)

// postgresImage is the official image the tests name; on machines without
// a registry ../shared/testimages/build.sh builds it locally.
const postgresImage = "postgres:15"

const pgPassword = "pg-secret-Pa55word"

var attver = regexp.MustCompile(`pg_attver=\d+`)

type pgServer struct {
	Host string
	Port string
	c    testcontainers.Container
}

func startPostgres(t *testing.T) *pgServer {
	t.Helper()
	requireDocker(t)
	ctx := context.Background()
	c, err := tcpostgres.Run(ctx, postgresImage, tcpostgres.WithDatabase("app"), tcpostgres.WithUsername("pipe"),
		tcpostgres.WithPassword(pgPassword), tcpostgres.BasicWaitStrategies(),
		// Docker's 64 MiB /dev/shm is too small for parallel VACUUM and
		// index builds; the official image's docs say to raise it.
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.ShmSize = 1 << 30 }))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatal(err)
	}
	host, port := mappedAddr(t, c, "5432/tcp")
	return &pgServer{Host: host, Port: port, c: c}
}

func (s *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://pipe:%s@%s:%s/%s?sslmode=disable", pgPassword, s.Host, s.Port, url.PathEscape(db))
}

func (s *pgServer) connect(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	pc, err := pgx.Connect(context.Background(), s.url(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close(context.Background()) })
	return pc
}

func (s *pgServer) exec(t *testing.T, db string, sql ...string) {
	t.Helper()
	pc := s.connect(t, db)
	for _, q := range sql {
		if _, err := pc.Exec(context.Background(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// pgDataset is pgbench's schema at scale 10 (a million accounts) and an
// events table of rows with text, numbers, timestamps and JSON, plus what a
// restore must carry besides rows: a view, a function, a trigger, a
// sequence in use, a partitioned table, foreign keys, indexes and
// identifiers that need quoting.
func pgDataset(events int) []string {
	return []string{
		`CREATE TABLE pgbench_branches (bid int PRIMARY KEY, bbalance int, filler char(88))`,
		`CREATE TABLE pgbench_tellers (tid int PRIMARY KEY, bid int REFERENCES pgbench_branches, tbalance int, filler char(84))`,
		`CREATE TABLE pgbench_accounts (aid int PRIMARY KEY, bid int REFERENCES pgbench_branches, abalance int, filler char(84))`,
		`CREATE TABLE pgbench_history (tid int, bid int, aid int, delta int, mtime timestamp, filler char(22))`,
		`INSERT INTO pgbench_branches SELECT b, 0, '' FROM generate_series(1, 10) b`,
		`INSERT INTO pgbench_tellers SELECT t, (t - 1) / 10 + 1, 0, '' FROM generate_series(1, 100) t`,
		`INSERT INTO pgbench_accounts SELECT a, (a - 1) / 100000 + 1, (a::bigint * 7919 % 10000)::int - 5000, '' FROM generate_series(1, 1000000) a`,
		`INSERT INTO pgbench_history SELECT t % 100 + 1, t % 10 + 1, t * 31 % 1000000 + 1, t % 1000 - 500, timestamp '2026-01-01' + t * interval '1 second', 'h' FROM generate_series(1, 50000) t`,
		`CREATE TABLE events (id bigserial PRIMARY KEY, account int NOT NULL REFERENCES pgbench_accounts, kind text NOT NULL,
			amount numeric(12,2), at timestamptz NOT NULL, payload jsonb, note text)`,
		fmt.Sprintf(`INSERT INTO events (account, kind, amount, at, payload, note)
			SELECT i %% 1000000 + 1, (ARRAY['deposit','withdrawal','transfer','fee'])[i %% 4 + 1], (i %% 100000) / 100.0,
				timestamptz '2026-01-01 00:00:00+00' + i * interval '17 seconds',
				jsonb_build_object('i', i, 'tags', jsonb_build_array('a' || i %% 7, 'b' || i %% 11), 'ok', i %% 3 = 0),
				CASE WHEN i %% 5 = 0 THEN NULL ELSE md5(i::text) || E'\ttab\\back\nnewline ü' END
			FROM generate_series(1, %d) i`, events),
		`CREATE INDEX events_at ON events (at)`,
		`CREATE INDEX events_kind ON events (kind, account)`,
		`CREATE SCHEMA "Odd Schema"`,
		`CREATE TABLE "Odd Schema"."Mixed.Case/Table" (id int GENERATED ALWAYS AS IDENTITY PRIMARY KEY, "Value" text, doubled int GENERATED ALWAYS AS (id * 2) STORED)`,
		`INSERT INTO "Odd Schema"."Mixed.Case/Table" ("Value") SELECT 'v' || g FROM generate_series(1, 1000) g`,
		`CREATE TABLE measurements (at date NOT NULL, v double precision) PARTITION BY RANGE (at)`,
		`CREATE TABLE measurements_2025 PARTITION OF measurements FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')`,
		`CREATE TABLE measurements_2026 PARTITION OF measurements FOR VALUES FROM ('2026-01-01') TO ('2027-01-01')`,
		`INSERT INTO measurements SELECT date '2025-01-01' + g % 700, g / 3.0 FROM generate_series(1, 20000) g`,
		`CREATE TABLE empty_table (id int)`,
		`CREATE VIEW account_totals AS SELECT account, sum(amount) AS total FROM events GROUP BY account`,
		`CREATE MATERIALIZED VIEW kind_counts AS SELECT kind, count(*) FROM events GROUP BY kind`,
		`CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.note := coalesce(NEW.note, '') || '!'; RETURN NEW; END $$`,
		`CREATE TRIGGER events_touch BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION touch()`,
		`CREATE SEQUENCE invoice_numbers START 1000`,
		`SELECT nextval('invoice_numbers') FROM generate_series(1, 42)`,
		`ANALYZE`,
	}
}

// pgFingerprint describes a database so that two equal ones match: its
// schema as pg_dump prints it, each table's row count and a hash of its
// rows in order, and the sequences' values.
func pgFingerprint(t *testing.T, s *pgServer, db string) string {
	t.Helper()
	schema, err := exec.Command("pg_dump", "--schema-only", "--no-password", "--dbname="+s.url(db)).Output()
	if err != nil {
		t.Fatalf("pg_dump --schema-only %s: %v", db, err)
	}
	var b strings.Builder
	for _, line := range strings.SplitAfter(string(schema), "\n") {
		// pg_dump's \restrict key is random per dump.
		// This server build gives identity columns a pg_attver option
		// that is new at every creation.
		if !strings.HasPrefix(line, `\restrict `) && !strings.HasPrefix(line, `\unrestrict `) {
			b.WriteString(attver.ReplaceAllString(line, "pg_attver=N"))
		}
	}
	pc := s.connect(t, db)
	ctx := context.Background()
	rows, err := pc.Query(ctx, `SELECT format('%I.%I', n.nspname, c.relname), c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind IN ('r', 'S', 'm') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	type rel struct {
		name string
		kind byte
	}
	rels, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (rel, error) {
		var x rel
		return x, r.Scan(&x.name, &x.kind)
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rels {
		q := "SELECT count(*), coalesce(md5(string_agg(x::text, E'\\n' ORDER BY x::text)), '') FROM " + r.name + " x"
		if r.kind == 'S' {
			q = "SELECT last_value, is_called::text FROM " + r.name
		}
		var n int64
		var h string
		if err := pc.QueryRow(ctx, q).Scan(&n, &h); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		fmt.Fprintf(&b, "%s %d %s\n", r.name, n, h)
	}
	return b.String()
}

const pgPipelines = `
variable "endpoint" {}
variable "bucket" {}
variable "access_key" { sensitive = true }
variable "secret_key" { sensitive = true }
variable "pg_host" {}
variable "pg_port" {}
variable "pg_password" { sensitive = true }
variable "jobs" { default = 1 }
variable "format" { default = "custom" }
variable "target" { default = "restored" }
variable "create" { default = true }
variable "globals" { default = false }
variable "clean" { default = false }

pipeline "backup" {
  source "postgres" {
    host     = var.pg_host
    port     = var.pg_port
    user     = "pipe"
    password = var.pg_password
    database = "app"
    sslmode  = "disable"
    format   = var.format
    jobs     = var.jobs
    globals  = var.globals
  }
  compress {
    codec = "zstd"
    level = 1
  }
  encrypt { recipients = [file("keys/backup.pub")] }
  checksum {}
  sink "s3" {
    bucket            = var.bucket
    key               = "pg/${pipeline.name}/${run.id}/"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
  }
}

pipeline "restore" {
  source "s3" {
    bucket            = var.bucket
    prefix            = "pg/backup/"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
  }
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "postgres" {
    dsn      = "postgres://pipe@${var.pg_host}:${var.pg_port}/${var.target}?sslmode=disable"
    password = var.pg_password
    create   = var.create
    clean    = var.clean
    jobs     = var.jobs
    globals  = var.globals
  }
}
`

type pgBench struct {
	s3  *s3Bench
	pg  *pgServer
	dir string
}

func newPGBench(t *testing.T) *pgBench {
	t.Helper()
	b := &pgBench{s3: newS3Bench(t), pg: startPostgres(t), dir: t.TempDir()}
	writeFile(t, filepath.Join(b.dir, "p.hcl"), []byte(pgPipelines))
	mustPipe(t, b.dir, nil, "keygen", "-o", "keys/backup", "--if-missing")
	return b
}

func (b *pgBench) env(bucket string, more ...string) []string {
	return b.s3.env(bucket, b.s3.m.Endpoint, append([]string{"PIPE_VAR_pg_host=" + b.pg.Host,
		"PIPE_VAR_pg_port=" + b.pg.Port, "PIPE_VAR_pg_password=" + pgPassword}, more...)...)
}

// PostgreSQL backed up to MinIO through zstd and age and restored into a
// new database, one pg_dump stream (custom and plain) and table by table
// (jobs = 4): the restored database matches the original in schema, rows
// and sequences; the manifest records the server; the password appears in
// no output and no stored object's name or manifest.
func TestPostgresRoundTrip(t *testing.T) {
	b := newPGBench(t)
	start := time.Now()
	b.pg.exec(t, "app", pgDataset(2_000_000)...)
	t.Logf("dataset loaded in %s", time.Since(start).Round(time.Millisecond))
	want := pgFingerprint(t, b.pg, "app")

	for _, tc := range []struct {
		name, format string
		jobs         int
		globals      bool // roles and tablespaces too, applied on restore
	}{{"custom", "custom", 1, true}, {"parallel", "custom", 4, false}, {"plain", "plain", 1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			bucket := b.s3.bucket(t, "pg-"+tc.name)
			target := "restored_" + tc.name
			env := b.env(bucket, fmt.Sprintf("PIPE_VAR_jobs=%d", tc.jobs), "PIPE_VAR_format="+tc.format, "PIPE_VAR_target="+target,
				fmt.Sprintf("PIPE_VAR_globals=%t", tc.globals))
			start := time.Now()
			backup := mustPipe(t, b.dir, env, "run", "p.hcl", "--pipeline", "backup", "--json")
			mid := time.Now()
			restore := mustPipe(t, b.dir, env, "run", "p.hcl", "--pipeline", "restore", "--json")
			t.Logf("backup %s, restore %s", mid.Sub(start).Round(time.Millisecond), time.Since(mid).Round(time.Millisecond))

			if got := pgFingerprint(t, b.pg, target); got != want {
				t.Fatalf("restored database differs from the original:\n%s", firstDiff(want, got))
			}
			if tc.name == "custom" {
				// Restoring again over it fails without clean, and with
				// clean gives the same database again.
				if r := runPipe(t, b.dir, env, "run", "p.hcl", "--pipeline", "restore"); r.Err == nil || !strings.Contains(r.Stderr, "already exists") {
					t.Errorf("a second restore into the same database: %v\n%s", r.Err, r.Stderr)
				}
				mustPipe(t, b.dir, append(env, "PIPE_VAR_clean=true"), "run", "p.hcl", "--pipeline", "restore")
				if got := pgFingerprint(t, b.pg, target); got != want {
					t.Fatalf("restored again with clean = true, the database differs:\n%s", firstDiff(want, got))
				}
			}
			m := b.s3.readManifest(t, bucket, "pg/backup/")
			wantFormat := tc.format
			if tc.jobs > 1 {
				wantFormat = "parallel"
			}
			if m.Source["type"] != "postgres" || m.Source["database"] != "app" || !strings.HasPrefix(m.Source["server_version"], "15") || m.Source["format"] != wantFormat || m.Source["size_bytes"] == "" {
				t.Errorf("manifest source facts = %v", m.Source)
			}
			hasGlobals := false
			for _, o := range m.Objects {
				hasGlobals = hasGlobals || o.Stream == "globals.sql"
			}
			if hasGlobals != tc.globals {
				t.Errorf("globals = %t, but the backup has globals.sql: %t", tc.globals, hasGlobals)
			}
			if tc.jobs > 1 {
				var streams []string
				for _, o := range m.Objects {
					streams = append(streams, o.Stream)
				}
				for _, s := range []string{"pre-data.dump", "sequences.sql", "data/public/events.copy", "data/Odd%20Schema/Mixed.Case%2FTable.copy", "data/public/measurements_2025.copy", "post-data.dump"} {
					if !contains(streams, s) {
						t.Errorf("parallel backup has no stream %q: %v", s, streams)
					}
				}
			}
			mjson, _ := json.Marshal(m)
			plan := mustPipe(t, b.dir, env, "plan", "p.hcl")
			for what, text := range map[string]string{"backup output": backup.Stdout + backup.Stderr,
				"restore output": restore.Stdout + restore.Stderr, "plan": plan.Stdout + plan.Stderr, "manifest": string(mjson)} {
				if strings.Contains(text, pgPassword) {
					t.Errorf("the database password appears in the %s", what)
				}
			}
			b.s3.noUploads(t, bucket)
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// firstDiff shows where two fingerprints start to differ.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) && i < len(g); i++ {
		if w[i] != g[i] {
			return fmt.Sprintf("line %d:\nwant %s\ngot  %s", i+1, w[i], g[i])
		}
	}
	return fmt.Sprintf("want %d lines, got %d", len(w), len(g))
}

// The database goes away in the middle of a dump: the run fails naming
// the dump, and the bucket holds no manifest and no upload. A restore
// whose target rejects a statement fails with the server's message.
func TestPostgresFaults(t *testing.T) {
	b := newPGBench(t)
	b.pg.exec(t, "app", pgDataset(1_000_000)...)

	for _, tc := range []struct {
		name string
		jobs int
		app  string // application_name of the connection to kill
	}{{"custom", 1, "pg_dump"}, {"parallel", 2, ""}} {
		t.Run("dies mid-dump/"+tc.name, func(t *testing.T) {
			bucket := b.s3.bucket(t, "pg-dies-"+tc.name)
			env := b.env(bucket, fmt.Sprintf("PIPE_VAR_jobs=%d", tc.jobs))
			done := make(chan result, 1)
			go func() { done <- runPipe(t, b.dir, env, "run", "p.hcl", "--pipeline", "backup") }()
			// Kill the dump's connections once one is copying a table.
			admin := b.pg.connect(t, "postgres")
			killed := false
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline) && !killed; {
				var n int
				err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE datname = 'app' AND pid <> pg_backend_pid() AND query ILIKE 'COPY %' AND state = 'active'`).Scan(&n)
				if err != nil {
					t.Fatal(err)
				}
				killed = n > 0
				if !killed {
					select {
					case r := <-done:
						t.Fatalf("the backup ended before its connection could be killed: %v\n%s", r.Err, r.Stderr)
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
			if !killed {
				t.Fatal("no COPY seen within 60 s")
			}
			r := <-done
			if r.Err == nil {
				t.Fatalf("the backup succeeded although its database connection was killed:\n%s", r.Stdout)
			}
			if !strings.Contains(r.Stderr, "terminat") {
				t.Errorf("the error does not say the connection was terminated:\n%s", r.Stderr)
			}
			for _, k := range b.s3.keys(t, bucket, "") {
				if strings.HasSuffix(k, pipefile.ManifestName) {
					t.Errorf("a failed backup left a manifest: %s", k)
				}
			}
			b.s3.noUploads(t, bucket)
		})
	}

	t.Run("restore rejects a statement", func(t *testing.T) {
		for _, jobs := range []int{1, 4} {
			bucket := b.s3.bucket(t, fmt.Sprintf("pg-reject-%d", jobs))
			target := fmt.Sprintf("conflict_%d", jobs)
			env := b.env(bucket, fmt.Sprintf("PIPE_VAR_jobs=%d", jobs), "PIPE_VAR_target="+target, "PIPE_VAR_create=false")
			mustPipe(t, b.dir, env, "run", "p.hcl", "--pipeline", "backup")
			// The target already has an events table, of another shape.
			b.pg.exec(t, "postgres", "CREATE DATABASE "+target)
			b.pg.exec(t, target, "CREATE TABLE events (id text)")
			r := runPipe(t, b.dir, env, "run", "p.hcl", "--pipeline", "restore")
			if r.Err == nil {
				t.Fatalf("jobs %d: the restore succeeded into a database with a conflicting table", jobs)
			}
			if !strings.Contains(r.Stderr, `relation "events" already exists`) {
				t.Errorf("jobs %d: the error does not carry the server's message:\n%s", jobs, r.Stderr)
			}
		}
	})
}
