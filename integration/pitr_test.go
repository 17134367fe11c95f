package integration

import (
	"context"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// The base backup pipeline, run from the host against the container's
// mapped port; its file also holds the archive the server pushes to, which
// verify and retention read.
var baseBackupFile = `
variable "pg_dsn" { sensitive = true }
variable "keep" { default = 5 }
pipeline "base" {
  source "postgres_basebackup" {
    dsn = var.pg_dsn
  }
  compress {}
  encrypt { recipients = [file("${var.keys}/wal.pub")] }
  ` + s3Block("sink", `key = "base/${run.id}/${stream.name}${stream.ext}"
    keep_last = var.keep`) + `
}
`

// drillFile drills the newest base backup: its checks pass only on a
// server recovered to the end of the archive, its tablespace in place.
const drillFile = `
pipeline "restore" {
  ` + `source "s3" {
    bucket            = var.bucket
    prefix            = "base/"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
  }
  decrypt { identities = [file("${var.keys}/wal.key")] }
  decompress {}
  sink "postgres_basebackup" {
    data_directory  = "/var/lib/postgresql/15/main"
    restore_command = "pipe wal fetch /etc/pipe/pg.hcl %f %p"
  }
}
drill "base" {
  pipeline = "restore"
  image    = "postgres:15"
  user     = "pipe"
  amcheck  = true
  check "marks" {
    database = "app"
    query    = "SELECT note FROM marks ORDER BY at"
    expect   = "before\nafter"
  }
  check "tablespace" {
    database = "app"
    query    = "SELECT count(*) FROM spaced"
    expect   = "6000"
  }
  check "recovered" {
    query  = "SELECT pg_is_in_recovery()"
    expect = "f"
  }
}
`

// pitrFile is the restore pipeline run inside the container: the newest
// base backup (before the target, if any) into dir, recovering through
// pipe wal fetch.
func pitrFile(dir, settings string) string {
	return s3Vars + `
variable "keys" { default = "/etc/pipe" }
pipeline "pitr" {
  ` + s3Block("source", `prefix = "base/"`) + `
  decrypt { identities = [file("${var.keys}/wal.key")] }
  decompress {}
  sink "postgres_basebackup" {
    data_directory  = "` + dir + `"
    restore_command = "pipe wal fetch /etc/pipe/pg.hcl %f %p"
    ` + settings + `
  }
}
`
}

// TestPITR takes a base backup of a server under load over the
// replication protocol, then recovers it in new data directories: to a
// moment between two writes, to the end of the archive (equal to the
// source, its tablespace linked from pg_tblspc, archiving off), and along
// a timeline a promotion started; a target no backup reaches is refused
// before anything is written; verify finds a gap in the WAL a backup
// needs, and retention removes only WAL no kept backup needs.
func TestPITR(t *testing.T) {
	requireDocker(t)
	b := newS3Bench(t)
	bucket := b.bucket(t, "pitr")
	keys := t.TempDir()
	mustPipe(t, keys, nil, "keygen", "-o", "wal")
	pg := startWALCluster(t, "pitr", true, b.inside(bucket), keys)
	ctx := context.Background()
	port, err := pg.c.MappedPort(ctx, "5432/tcp")
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	writeFile(t, filepath.Join(host, "base.hcl"), []byte(strings.Replace(walFile, "ASYNC", "false", 1)+baseBackupFile))
	dsn := fmt.Sprintf("postgres://pipe:%s@localhost:%s/app?sslmode=disable", pgPassword, port.Port())
	env := b.env(bucket, b.m.Endpoint, "PIPE_VAR_keys="+keys, "PIPE_VAR_pg_dsn="+dsn)

	// The official image lets no host make replication connections: pipe
	// says which line pg_hba.conf lacks, and never the password.
	r := runPipe(t, host, env, "run", "base.hcl")
	if r.Err == nil || !strings.Contains(r.Stderr, "pg_hba.conf") || !strings.Contains(r.Stderr, "host replication pipe") {
		t.Fatalf("a base backup without a replication entry in pg_hba.conf: %v\n%s", r.Err, r.Stderr)
	}
	noSecret(t, "the refused run's output", r.Stdout+r.Stderr, pgPassword)
	pg.mustSh(t, `echo "host replication all all scram-sha-256" >> pg_hba.conf`)
	pg.psql(t, 5432, "SELECT pg_reload_conf()")

	// The server's archiving is in postgresql.auto.conf too, as ALTER
	// SYSTEM leaves it: a restored server would inherit it.
	pg.psql(t, 5432, "ALTER SYSTEM SET archive_mode = on")
	pg.psql(t, 5432, "ALTER SYSTEM SET archive_command = '"+archiveCommand[true]+"'")
	// A tablespace outside the data directory, with a table in it.
	pg.mustSh(t, "mkdir -m 700 /tmp/ts")
	pg.psql(t, 5432, "CREATE TABLESPACE ts LOCATION '/tmp/ts'")
	pg.psql(t, 5432, "CREATE TABLE spaced (n int, note text) TABLESPACE ts")
	pg.psql(t, 5432, "INSERT INTO spaced SELECT g, md5(g::text) FROM generate_series(1, 5000) g")
	tsOID := pg.psql(t, 5432, "SELECT oid FROM pg_tablespace WHERE spcname = 'ts'")

	// A base backup while pgbench writes.
	pg.mustSh(t, "pgbench -h /var/run/postgresql -U pipe -i -s 8 -q app")
	load := make(chan string, 1)
	go func() {
		_, out := pg.sh(t, "pgbench -h /var/run/postgresql -U pipe -c 2 -T 8 app")
		load <- out
	}()
	time.Sleep(2 * time.Second)
	r = mustPipe(t, host, env, "run", "--json", "base.hcl")
	noSecret(t, "the base backup's output", r.Stdout+r.Stderr, pgPassword)
	if out := <-load; !strings.Contains(out, "transactions actually processed") {
		t.Fatalf("pgbench: %s", out)
	}
	m := b.readManifest(t, bucket, "base/")
	for _, k := range []string{"system_identifier", "timeline", "start_lsn", "stop_lsn", "stop_time", "wal_segment_size"} {
		if m.Source[k] == "" {
			t.Errorf("the manifest records no %s: %v", k, m.Source)
		}
	}
	streams := map[string]bool{}
	for _, o := range m.Objects {
		streams[o.Stream] = true
	}
	if !streams["base.tar"] || !streams["backup_manifest"] || !streams[tsOID+".tar"] {
		t.Errorf("the base backup stored %v, not base.tar, %s.tar and backup_manifest", streams, tsOID)
	}
	if got := m.Source["tablespace_"+tsOID]; got != "/tmp/ts" {
		t.Errorf("the manifest records tablespace %s at %q, not /tmp/ts", tsOID, got)
	}

	// Writes with known times: the target lies between them.
	pg.psql(t, 5432, "CREATE TABLE marks (note text, at timestamptz DEFAULT clock_timestamp())")
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('before')")
	pg.psql(t, 5432, "INSERT INTO spaced SELECT g, 'after the backup' FROM generate_series(5001, 6000) g")
	time.Sleep(1500 * time.Millisecond)
	target := pg.psql(t, 5432, "SELECT clock_timestamp()::text")
	time.Sleep(1500 * time.Millisecond)
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('after')")
	pg.archivedThrough(t)
	want := tableDigests(t, pg, 5432)

	// A drill of the base backup: restored on the host into a scratch
	// folder, recovered in a postgres:15 container to the end of the
	// archive, checked, removed.
	// (Only this step needs the docker CLI: without it, it alone skips.)
	t.Run("drill", func(t *testing.T) {
		needDockerCLI(t)
		writeFile(t, filepath.Join(host, "drill.hcl"), []byte(strings.Replace(walFile, "ASYNC", "false", 1)+drillFile))
		before := scratchLeft(t)
		r := runPipe(t, host, env, "drill", "drill.hcl", "--json")
		if o := drillResult(t, r); r.Err != nil || !o.OK || len(o.Checks) != 4 {
			t.Errorf("a drill of the base backup: %v %+v\n%s\n%s", r.Err, o, r.Stdout, r.Stderr)
		}
		if n := scratchLeft(t); n != before {
			t.Errorf("%d scratch servers left, want %d", n, before)
		}
	})

	// The base backup's WAL is all archived; the run lists its range.
	r = mustPipe(t, host, env, "verify", "base.hcl")
	if !strings.Contains(r.Stdout, "all archived") {
		t.Errorf("verify of the base backup did not check its WAL:\n%s", r.Stdout)
	}
	r = mustPipe(t, host, env, "backups", "base.hcl")
	if !strings.Contains(r.Stdout, "WAL 0000000100") {
		t.Errorf("pipe backups lists no WAL range:\n%s", r.Stdout)
	}

	restore := func(name, dir, settings string) {
		t.Helper()
		if err := pg.c.CopyToContainer(ctx, []byte(pitrFile(dir, settings)), "/etc/pipe/"+name+".hcl", 0o644); err != nil {
			t.Fatal(err)
		}
		pg.mustSh(t, "pipe run /etc/pipe/"+name+".hcl")
	}
	stop := func(dir string) { pg.mustSh(t, "pg_ctl -D "+dir+" -m fast -w stop") }

	// A restore refuses a data directory that is not empty.
	pg.mustSh(t, "mkdir -p /tmp/full && touch /tmp/full/PG_VERSION")
	if err := pg.c.CopyToContainer(ctx, []byte(pitrFile("/tmp/full", "")), "/etc/pipe/full.hcl", 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := pg.sh(t, "pipe run /etc/pipe/full.hcl"); code == 0 || !strings.Contains(out, "not empty") {
		t.Errorf("a restore into a data directory that holds files: exit %d\n%s", code, out)
	}
	// A target no backup can reach (the backup's start, before its end)
	// is refused before anything is written.
	if err := pg.c.CopyToContainer(ctx, []byte(pitrFile("/tmp/pitr-early", fmt.Sprintf("recovery_target_lsn = %q", m.Source["start_lsn"]))), "/etc/pipe/early.hcl", 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := pg.sh(t, "pipe run /etc/pipe/early.hcl"); code == 0 || !strings.Contains(out, "no complete run can be recovered to recovery_target_lsn") {
		t.Errorf("a restore to a position before the backup's end: exit %d\n%s", code, out)
	}
	if code, _ := pg.sh(t, "test -e /tmp/pitr-early"); code == 0 {
		t.Error("a refused restore made its data directory")
	}

	// To the end of the archive: every file is the server's (its own
	// backup manifest says so), and every table equals the source's.
	restore("end", "/tmp/pitr-end", "")
	if code, out := pg.sh(t, "pg_verifybackup --no-parse-wal --ignore=tablespace_map /tmp/pitr-end"); code != 0 || !strings.Contains(out, "successfully verified") {
		t.Errorf("pg_verifybackup of the restored data directory: exit %d\n%s", code, out)
	}
	pg.startRestored(t, "/tmp/pitr-end", 5441, "")
	if got := tableDigests(t, pg, 5441); got != want {
		t.Errorf("recovered to the end of the archive:\n%s\nthe source:\n%s", got, want)
	}
	// The tablespace is a directory of its own, linked from pg_tblspc
	// (PostgreSQL PANICs at the end of recovery on a directory there).
	if out := pg.mustSh(t, "readlink /tmp/pitr-end/pg_tblspc/"+tsOID); strings.TrimSpace(out) != "/tmp/pitr-end_tablespaces/"+tsOID {
		t.Errorf("pg_tblspc/%s links to %q, not /tmp/pitr-end_tablespaces/%s", tsOID, out, tsOID)
	}
	if got := pg.psql(t, 5441, "SELECT pg_tablespace_location(oid) FROM pg_tablespace WHERE spcname = 'ts'"); got != "/tmp/pitr-end_tablespaces/"+tsOID {
		t.Errorf("the restored tablespace is at %q", got)
	}
	// A restored server does not archive into the source's archive.
	if got := pg.psql(t, 5441, "SHOW archive_mode"); got != "off" {
		t.Errorf("the restored server runs with archive_mode = %s: it would push its new timeline into the source's archive", got)
	}
	stop("/tmp/pitr-end")

	// To a moment between two writes; the promoted server archives its
	// new timeline with pipe too.
	restore("time", "/tmp/pitr-time", fmt.Sprintf(`recovery_target_time   = %q
    recovery_target_action = "promote"`, target))
	log := pg.startRestored(t, "/tmp/pitr-time", 5442, `"archive_mode = on" "archive_command = 'pipe wal push /etc/pipe/pg.hcl %p'"`)
	if got := pg.psql(t, 5442, "SELECT string_agg(note, ',' ORDER BY at) FROM marks"); got != "before" {
		t.Errorf("recovered to %s: marks holds %q, want only 'before'\n%s", target, got, lastLines(log, 20))
	}
	if tli := pg.psql(t, 5442, "SELECT timeline_id FROM pg_control_checkpoint()"); tli != "2" {
		t.Errorf("the promoted server is on timeline %s, not 2", tli)
	}
	pg.psql(t, 5442, "INSERT INTO marks (note) VALUES ('timeline 2')")
	pg.archivedOn(t, 5442, func() string { return pg.mustSh(t, "tail -40 /tmp/pitr-time.log") })
	stop("/tmp/pitr-time")

	// The newest timeline is followed through its history file.
	restore("latest", "/tmp/pitr-latest", "")
	pg.startRestored(t, "/tmp/pitr-latest", 5443, "")
	if got := pg.psql(t, 5443, "SELECT string_agg(note, ',' ORDER BY at) FROM marks"); got != "before,timeline 2" {
		t.Errorf("recovered along the latest timeline: marks holds %q, want 'before,timeline 2'", got)
	}
	stop("/tmp/pitr-latest")

	// A second base backup, keep 1: the first goes, and the WAL only it
	// needed with it; the second's WAL stays and verifies.
	sysid := m.Source["system_identifier"]
	firstStart := segmentOf(m.Source["start_lsn"])
	r = mustPipe(t, host, append(env, "PIPE_VAR_keep=1"), "run", "--json", "base.hcl")
	if !strings.Contains(r.Stdout, `"wal_retention"`) {
		t.Errorf("the run reports no WAL retention:\n%s", r.Stdout)
	}
	m2 := b.readManifest(t, bucket, "base/")
	secondStart := segmentOf(m2.Source["start_lsn"])
	left := b.keys(t, bucket, "archive/"+sysid+"/00000001/")
	if len(left) < 2 {
		t.Fatalf("retention left %d files of timeline 1", len(left))
	}
	for _, k := range left {
		name := strings.SplitN(path.Base(k), "-", 2)[0]
		if !strings.HasSuffix(name, ".history") && name[8:24] < secondStart {
			t.Errorf("retention kept %s, before the kept backup's first segment %s", name, secondStart)
		}
		if name[8:24] == firstStart {
			t.Errorf("retention kept %s, of the deleted backup", name)
		}
	}
	mustPipe(t, host, env, "verify", "base.hcl")

	// A gap in the WAL the backup needs: verify names the segment.
	first, last := m2.Source["start_lsn"], m2.Source["stop_lsn"]
	var victim string
	for _, k := range b.keys(t, bucket, "archive/"+sysid+"/00000001/") {
		if name := path.Base(k); strings.HasPrefix(name[8:], segmentOf(first)) && name[24] == '-' {
			victim = k
		}
	}
	if victim == "" {
		t.Fatalf("no archived segment holds the backup's start %s (…%s)", first, last)
	}
	if _, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &victim}); err != nil {
		t.Fatal(err)
	}
	r = runPipe(t, host, env, "verify", "base.hcl")
	if r.Err == nil || !strings.Contains(r.Stdout, strings.SplitN(path.Base(victim), "-", 2)[0]) {
		t.Errorf("verify with %s gone: %v\n%s", victim, r.Err, r.Stdout)
	}
}

// startRestored runs a restored data directory on port, with the
// settings conf (quoted lines for postgresql.auto.conf), and waits until
// recovery ends; it returns the server's log.
func (w *walCluster) startRestored(t *testing.T, dir string, port int, conf string) string {
	t.Helper()
	if code, out := w.sh(t, fmt.Sprintf("printf '%%s\\n' 'port = %d' %s >> %s/postgresql.auto.conf && pg_ctl -D %s -l %s.log -w -t 300 start", port, conf, dir, dir, dir)); code != 0 {
		// The server's own words: a PANIC at the end of recovery, say.
		t.Fatalf("starting %s: exit %d\n%s\n%s", dir, code, out, w.mustSh(t, "tail -20 "+dir+".log"))
	}
	deadline := time.Now().Add(3 * time.Minute)
	for w.psql(t, port, "SELECT pg_is_in_recovery()") != "f" {
		if time.Now().After(deadline) {
			t.Fatalf("%s is still recovering after 3 minutes:\n%s", dir, w.mustSh(t, "tail -30 "+dir+".log"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	return w.mustSh(t, "cat "+dir+".log")
}

// segmentOf is the log and segment part (16 hex digits) of the name of
// the 1 MiB segment that holds lsn.
func segmentOf(lsn string) string {
	var hi, lo uint64
	fmt.Sscanf(lsn, "%X/%X", &hi, &lo)
	return fmt.Sprintf("%08X%08X", hi, lo>>20)
}

// tableDigests sums up every table of the app database: its rows' count
// and an MD5 of all of them in order.
func tableDigests(t *testing.T, pg *walCluster, port int) string {
	t.Helper()
	var b strings.Builder
	for _, tbl := range strings.Fields(pg.psql(t, port, "SELECT string_agg(quote_ident(tablename), ' ' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'public'")) {
		fmt.Fprintf(&b, "%s %s\n", tbl, pg.psql(t, port, fmt.Sprintf("SELECT count(*) || ' ' || md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM %s t", tbl)))
	}
	return b.String()
}
