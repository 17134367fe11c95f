package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

const pgClusterPipelines = `
variable "endpoint" {}
variable "bucket" {}
variable "access_key" { sensitive = true }
variable "secret_key" { sensitive = true }
variable "pg_host" {}
variable "pg_port" {}
variable "backup_password" { sensitive = true }
variable "target_host" {}
variable "target_port" {}
variable "pg_password" { sensitive = true }
variable "restore" {
  type    = list(string)
  default = ["*"]
}
variable "clean" { default = false }

pipeline "backup" {
  streams    = var.streams
  rate_limit = var.rate
  source "postgres" {
    host      = var.pg_host
    port      = var.pg_port
    user      = "backup"
    password  = var.backup_password
    sslmode   = "disable"
    databases = ["*"]
    exclude_databases = ["scratch_*", "app"]
    jobs      = var.jobs
  }
  compress { codec = "zstd" }
  encrypt { recipients = [file("keys/backup.pub")] }
  checksum {}
  sink "s3" {
    bucket            = var.bucket
    key               = "cluster/${var.set}/${run.id}/"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
  }
}

pipeline "restore" {
  streams = 4
  source "s3" {
    bucket            = var.bucket
    prefix            = "cluster/${var.set}/"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
  }
  decrypt { identities = [file("keys/backup.key")] }
  decompress {}
  sink "postgres" {
    host      = var.target_host
    port      = var.target_port
    user      = "pipe"
    password  = var.pg_password
    sslmode   = "disable"
    databases = var.restore
    clean     = var.clean
    jobs      = var.jobs
  }
}

variable "streams" { default = 4 }
# The table-by-table pass: jobs = 2, its own set of runs, and a rate
# limit that gives the test time to drop a database halfway through its
# tables.
variable "jobs" { default = 1 }
variable "set" { default = "backup" }
variable "rate" { default = "10GiB/s" }

`

// pgClusterDatabases are the test's databases: one large, several small,
// one whose name needs quoting, one owned by a role of its own (globals
// first on restore), one the backup role may not connect to, and one
// dropped while the backup runs.
var pgClusterDatabases = []string{"big", "crm", "billing_2026", "app_a", "Odd DB/ü", "owned", "secret", "doomed"}

const backupPassword = "backup-Pa55-secret"

// TestPostgresCluster backs up every database of a server in one run and
// restores them into an empty server: the databases the backup role may
// not read, or that vanish mid-run, are reported failed by name while the
// others are stored; the restore of all of them, and of one chosen, gives
// equal databases.
func TestPostgresCluster(t *testing.T) {
	b := newPGBench(t)
	target := startPostgres(t)
	writeFile(t, filepath.Join(b.dir, "cluster.hcl"), []byte(pgClusterPipelines))
	start := time.Now()
	b.pg.exec(t, "app",
		`CREATE ROLE backup LOGIN PASSWORD '`+backupPassword+`' IN ROLE pg_read_all_data`,
		`CREATE ROLE shop_owner`,
		`CREATE DATABASE scratch_1`)
	for _, db := range pgClusterDatabases {
		id := `"` + strings.ReplaceAll(db, `"`, `""`) + `"`
		owner := ""
		if db == "owned" {
			owner = " OWNER shop_owner"
		}
		b.pg.exec(t, "app", "CREATE DATABASE "+id+owner)
		rows := 2_000
		switch db {
		case "big":
			rows = 400_000
		case "doomed": // the smallest: dumped last but "secret", well after the drop
			rows = 10
		}
		b.pg.exec(t, db,
			`CREATE TABLE items (id bigserial PRIMARY KEY, name text NOT NULL, qty int, at timestamptz, doc jsonb)`,
			fmt.Sprintf(`INSERT INTO items (name, qty, at, doc) SELECT md5(g::text) || '`+strings.ReplaceAll(db, "'", "''")+`', g %% 97,
				timestamptz '2026-01-01' + g * interval '1 minute', jsonb_build_object('g', g) FROM generate_series(1, %d) g`, rows),
			`CREATE INDEX items_name ON items (name)`,
			`CREATE VIEW totals AS SELECT qty, count(*) FROM items GROUP BY qty`)
	}
	b.pg.exec(t, "owned", `ALTER TABLE items OWNER TO shop_owner`)
	b.pg.exec(t, "app", `REVOKE CONNECT ON DATABASE secret FROM PUBLIC`)
	t.Logf("8 databases loaded in %s", time.Since(start).Round(time.Millisecond))
	want := map[string]string{}
	for _, db := range pgClusterDatabases {
		want[db] = pgFingerprint(t, b.pg, db)
	}

	bucket := b.s3.bucket(t, "cluster")
	env := b.env(bucket, "PIPE_VAR_backup_password="+backupPassword, "PIPE_VAR_target_host="+target.Host, "PIPE_VAR_target_port="+target.Port)

	// One stream at a time, largest first: "doomed" is dropped while the
	// large database is dumped, before its turn.
	start = time.Now()
	w := startPipe(t, b.dir, append(env, "PIPE_VAR_streams=1"), "run", "cluster.hcl", "--pipeline", "backup", "--json")
	w.moved(t, "source", "out", 1)
	b.pg.exec(t, "app", `DROP DATABASE doomed WITH (FORCE)`)
	res := w.wait()
	t.Logf("cluster backup in %s", time.Since(start).Round(time.Millisecond))
	if res.Err == nil {
		t.Fatalf("the backup succeeded with a database it may not read:\n%s", res.Stderr)
	}
	failed := map[string]string{}
	for _, f := range onePipeline(t, res.Stdout).Failed {
		failed[f.Stream] = f.Error
	}
	if len(failed) != 2 || !strings.Contains(failed["secret.dump"], "permission denied") || !strings.Contains(failed["doomed.dump"], "does not exist") {
		t.Errorf("failed streams %v, want secret.dump (permission denied) and doomed.dump (does not exist)", failed)
	}
	m := b.s3.readManifest(t, bucket, "cluster/backup/")
	var stored []string
	for _, o := range m.Objects {
		stored = append(stored, o.Stream)
	}
	slices.Sort(stored)
	if want := "Odd%20DB%2F%C3%BC.dump app_a.dump big.dump billing_2026.dump crm.dump globals.sql owned.dump"; strings.Join(stored, " ") != want {
		t.Errorf("stored %v, want %s", stored, want)
	}
	if len(m.Failed) != 2 || m.Source["databases"] != "8" || m.Source["role_passwords"] == "" {
		t.Errorf("manifest failed %+v, source %v", m.Failed, m.Source)
	}
	list := mustPipe(t, b.dir, env, "backups", "cluster.hcl", "--pipeline", "backup")
	if !strings.Contains(list.Stdout, "7 (2 failed)") {
		t.Errorf("pipe backups does not show the partial run:\n%s", list.Stdout)
	}
	for what, text := range map[string]string{"output": res.Stdout + res.Stderr, "listing": list.Stdout + list.Stderr} {
		if strings.Contains(text, backupPassword) || strings.Contains(text, pgPassword) {
			t.Errorf("a password appears in the backup's %s", what)
		}
	}

	// One chosen database into the empty server.
	r := mustPipe(t, b.dir, append(env, `PIPE_VAR_restore=["crm"]`), "run", "--json", "cluster.hcl", "--pipeline", "restore")
	// The others are not even downloaded.
	if s := strings.Join(onePipeline(t, r.Stdout).Skipped, " "); !strings.Contains(s, "big.dump") || strings.Contains(s, "crm") || strings.Contains(s, "globals") {
		t.Errorf("restoring crm alone skipped %q: the other databases' streams, not crm's or the globals", s)
	}
	if got := pgDatabases(t, target); strings.Join(got, " ") != "crm" {
		t.Fatalf("after restoring crm alone the server has %v", got)
	}
	if got := pgFingerprint(t, target, "crm"); got != want["crm"] {
		t.Fatalf("crm differs:\n%s", firstDiff(want["crm"], got))
	}
	// The databases the run lacks are named though none was asked for.
	if rep := onePipeline(t, r.Stdout); len(rep.Missing) != 0 || !failedInBackup(rep, "secret.dump", "doomed.dump") {
		t.Errorf("restoring crm alone: missing %v, failed in the backup %v; want none missing, secret and doomed named", rep.Missing, rep.FailedInBackup)
	}
	// crm and secret, which failed in the backup: crm is restored, and the
	// run fails naming secret with the backup's error.
	r = runPipe(t, b.dir, append(env, `PIPE_VAR_restore=["crm", "secret"]`, "PIPE_VAR_clean=true"), "run", "--json", "cluster.hcl", "--pipeline", "restore")
	if rep := onePipeline(t, r.Stdout); r.Err == nil || strings.Join(rep.Missing, " ") != "secret.dump" || !strings.Contains(r.Stdout, "permission denied") {
		t.Errorf("restoring crm and secret: %v, missing %v; want exit 1 naming secret.dump and its error\n%s", r.Err, rep.Missing, r.Stdout)
	}
	if got := pgDatabases(t, target); strings.Join(got, " ") != "crm" {
		t.Fatalf("after restoring crm and secret the server has %v", got)
	}
	// All of them: crm exists, so without clean the restore fails.
	if r := runPipe(t, b.dir, env, "run", "cluster.hcl", "--pipeline", "restore"); r.Err == nil || !strings.Contains(r.Stderr, "already exists") {
		t.Errorf("restoring over an existing database: %v\n%s", r.Err, r.Stderr)
	}
	// All of them, with clean: every database the run holds is restored,
	// and the run exits 1 naming the two it lacks.
	start = time.Now()
	r = runPipe(t, b.dir, append(env, "PIPE_VAR_clean=true"), "run", "cluster.hcl", "--pipeline", "restore")
	t.Logf("cluster restore in %s", time.Since(start).Round(time.Millisecond))
	if r.Err == nil || !regexp.MustCompile(`missing +asked for, not in the run \(each failed in the backup\): (secret|doomed)\.dump, (secret|doomed)\.dump`).MatchString(r.Stderr) ||
		!strings.Contains(r.Stderr, "2 streams asked for not in run") {
		t.Errorf("restoring all of a partial run: %v, want exit 1 naming secret.dump and doomed.dump\n%s", r.Err, r.Stderr)
	}
	got := pgDatabases(t, target)
	if strings.Join(got, " ") != "Odd DB/ü app_a big billing_2026 crm owned" {
		t.Fatalf("restored databases %v", got)
	}
	for _, db := range got {
		if fp := pgFingerprint(t, target, db); fp != want[db] {
			t.Errorf("%s differs:\n%s", db, firstDiff(want[db], fp))
		}
	}
	var owner string
	if err := target.connect(t, "app").QueryRow(context.Background(), `SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'owned'`).Scan(&owner); err != nil || owner != "shop_owner" {
		t.Errorf("owned is owned by %q (%v), want shop_owner: the globals come first", owner, err)
	}

	// Table by table (jobs = 2, so two streams at once), the run slowed:
	// "big", the largest and read first, is dropped while its streams
	// are read, after its schema was stored. Its other streams are
	// stored, and the restore leaves all of them out: a database comes
	// back with all of its tables or not at all.
	jobs := append(slices.Clip(env), "PIPE_VAR_jobs=2", "PIPE_VAR_set=jobs", "PIPE_VAR_streams=1", "PIPE_VAR_rate=4MiB/s")
	start = time.Now()
	w = startPipe(t, b.dir, jobs, "run", "cluster.hcl", "--pipeline", "backup", "--json")
	w.moved(t, "source", "out", 2<<20)
	t.Logf("table-by-table backup: 2 MiB read after %s", time.Since(start).Round(time.Millisecond))
	b.pg.exec(t, "app", `DROP DATABASE big WITH (FORCE)`)
	res = w.wait()
	t.Logf("table-by-table backup ended after %s", time.Since(start).Round(time.Millisecond))
	if res.Err == nil {
		t.Fatalf("the table-by-table backup succeeded with a database dropped halfway:\n%s", res.Stderr)
	}
	m = b.s3.readManifest(t, bucket, "cluster/jobs/")
	stored, failed = nil, map[string]string{}
	for _, o := range m.Objects {
		stored = append(stored, o.Stream)
	}
	for _, f := range m.Failed {
		failed[f.Stream] = f.Error
	}
	slices.Sort(stored)
	for _, s := range []string{"big/pre-data.dump", "crm/pre-data.dump", "crm/data/public/items.copy", "crm/sequences.sql", "crm/post-data.dump", "Odd%20DB%2F%C3%BC/data/public/items.copy", "globals.sql"} {
		if !slices.Contains(stored, s) {
			t.Errorf("%s not stored; stored %v", s, stored)
		}
	}
	// Which of big's streams fail depends on where the drop lands (its
	// table, or its schema after the data when the table was read
	// before): some of them, never its schema before the data.
	bigFailed := false
	for s := range failed {
		bigFailed = bigFailed || strings.HasPrefix(s, "big/")
	}
	if !bigFailed || !strings.Contains(failed["secret.dump"], "permission denied") || m.Source["dumped_whole"] == "" {
		t.Errorf("failed %v (source %v): want some of big's streams, and secret dumped whole and denied", failed, m.Source)
	}
	for _, db := range pgDatabases(t, target) {
		target.exec(t, "app", `DROP DATABASE "`+strings.ReplaceAll(db, `"`, `""`)+`" WITH (FORCE)`)
	}
	r = runPipe(t, b.dir, jobs, "run", "--json", "cluster.hcl", "--pipeline", "restore")
	rep := onePipeline(t, r.Stdout)
	if s := strings.Join(rep.Incomplete, " "); !strings.Contains(s, "big/pre-data.dump") || strings.Contains(s, "crm") {
		t.Errorf("incomplete streams %q: want big's, and only big's", s)
	}
	// All were asked for: the run exits 1 naming big's failed streams and
	// secret.dump.
	if s := strings.Join(rep.Missing, " "); r.Err == nil || !strings.Contains(s, "secret.dump") || !strings.Contains(s, "big/") {
		t.Errorf("the table-by-table restore: %v, missing %q; want exit 1 naming big's streams and secret.dump", r.Err, s)
	}
	got = pgDatabases(t, target)
	if strings.Join(got, " ") != "Odd DB/ü app_a billing_2026 crm owned" {
		t.Fatalf("restored databases %v, want all but big (incomplete) and secret (failed)", got)
	}
	for _, db := range got {
		if fp := pgFingerprint(t, target, db); fp != want[db] {
			t.Errorf("%s differs after the table-by-table restore:\n%s", db, firstDiff(want[db], fp))
		}
	}
	if err := target.connect(t, "app").QueryRow(context.Background(), `SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'owned'`).Scan(&owner); err != nil || owner != "shop_owner" {
		t.Errorf("after the table-by-table restore owned is owned by %q (%v), want shop_owner", owner, err)
	}
}

// runReport is one pipeline's part of `pipe run --json`.
type runReport struct {
	Failed         []struct{ Stream, Error string } `json:"failed_streams"`
	Skipped        []string                         `json:"skipped_streams"`
	Incomplete     []string                         `json:"incomplete_streams"`
	FailedInBackup []struct{ Stream, Error string } `json:"failed_in_backup"`
	Missing        []string                         `json:"missing_streams"`
}

// failedInBackup reports whether a restore's report names exactly these
// streams as failed in the backup.
func failedInBackup(rep runReport, streams ...string) bool {
	var got []string
	for _, f := range rep.FailedInBackup {
		got = append(got, f.Stream)
	}
	slices.Sort(got)
	slices.Sort(streams)
	return slices.Equal(got, streams)
}

// onePipeline reads the --json report of a run of one pipeline.
func onePipeline(t *testing.T, stdout string) runReport {
	t.Helper()
	var out struct {
		Pipelines []runReport `json:"pipelines"`
	}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil || len(out.Pipelines) != 1 {
		t.Fatalf("pipe run --json: %v\n%s", err, stdout)
	}
	return out.Pipelines[0]
}

// pgDatabases lists a server's databases besides the image's own.
func pgDatabases(t *testing.T, s *pgServer) []string {
	t.Helper()
	rows, err := s.connect(t, "app").Query(context.Background(), `SELECT datname FROM pg_database WHERE NOT datistemplate AND datname NOT IN ('postgres', 'app') ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}
