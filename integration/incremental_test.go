package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
)

// incrementalBaseFile is baseBackupFile with incrementals: a full, then
// incrementals until full_every runs.
var incrementalBaseFile = strings.Replace(baseBackupFile, "dsn = var.pg_dsn", `dsn = var.pg_dsn
    incremental = true
    full_every  = 10`, 1)

// chainRestoreFile restores the run settings pick (the newest, a named
// one, the newest before a target) into dir, inside the container.
func chainRestoreFile(dir, source, settings string) string {
	return s3Vars + `
variable "keys" { default = "/etc/pipe" }
pipeline "chain" {
  ` + s3Block("source", `prefix = "base/"
    `+source) + `
  decrypt { identities = [file("${var.keys}/wal.key")] }
  decompress {}
  sink "postgres_basebackup" {
    data_directory  = "` + dir + `"
    restore_command = "pipe wal fetch /etc/pipe/pg.hcl %f %p"
    ` + settings + `
  }
}
pipeline "raw" {
  ` + s3Block("source", `prefix = "base/"
    `+source) + `
  decrypt { identities = [file("${var.keys}/wal.key")] }
  decompress {}
  sink "fs" { path = "` + dir + `/" }
}
`
}

// baseRuns are the base backups in the bucket, oldest first.
func baseRuns(t *testing.T, b *s3Bench, bucket string) []*manifest.Manifest {
	t.Helper()
	return runsUnder(t, b, bucket, "base/")
}

// runsUnder are the manifests of the runs under prefix, oldest first.
func runsUnder(t *testing.T, b *s3Bench, bucket, prefix string) []*manifest.Manifest {
	t.Helper()
	var runs []*manifest.Manifest
	for _, k := range b.keys(t, bucket, prefix) {
		if !strings.HasSuffix(k, pipefile.ManifestName) {
			continue
		}
		data, _ := b.get(bucket, k)
		m, err := manifest.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, m)
	}
	slices.SortFunc(runs, func(a, b *manifest.Manifest) int { return a.FinishedAt.Compare(b.FinishedAt) })
	return runs
}

func stored(m *manifest.Manifest) int64 {
	var n int64
	for _, o := range m.Objects {
		n += o.Size
	}
	return n
}

// TestIncrementalBaseBackups takes, of PostgreSQL 17 archiving through
// pipe, a full base backup and six incrementals with changes between
// them (rows updated, a table created, one dropped, one truncated by
// VACUUM, a tablespace's table grown), then restores chains into new
// data directories: every file of the data directory equals
// pg_combinebackup's output for the same runs, pg_verifybackup accepts
// it, and recovery reaches the source's rows, at the end and at a time
// between two incrementals. verify names a parent whose object is gone,
// and the next run is a full that says why; delete refuses to orphan
// runs; summarize_wal = off gets a full and a notice; a parent the
// server refuses gets a full naming the server's refusal; a server promoted
// onto a new timeline gets a full, then incrementals on its timeline.
// On PostgreSQL 17 and 18.
func TestIncrementalBaseBackups(t *testing.T) {
	requireDocker(t)
	b := newS3Bench(t)
	keys := t.TempDir()
	mustPipe(t, keys, nil, "keygen", "-o", "wal")
	for _, v := range pgVersions[2:] {
		t.Run(v.major, func(t *testing.T) { testIncremental(t, b, keys, v) })
	}
}

func testIncremental(t *testing.T, b *s3Bench, keys string, v pgVersion) {
	bucket := b.bucket(t, "incremental"+v.major)
	pg := startVersionCluster(t, v, b.inside(bucket), keys)
	ctx := context.Background()
	if got := pg.psql(t, 5432, "SHOW server_version_num"); !strings.HasPrefix(got, v.major) {
		t.Fatalf("%s runs %s", v.image, got)
	}
	pg.mustSh(t, `echo "host replication all all scram-sha-256" >> pg_hba.conf && mkdir -m 700 /tmp/ts`)
	pg.psql(t, 5432, "ALTER SYSTEM SET summarize_wal = on")
	pg.psql(t, 5432, "SELECT pg_reload_conf()")
	pg.psql(t, 5432, "CREATE TABLESPACE ts LOCATION '/tmp/ts'")
	for _, sql := range []string{
		"CREATE TABLE spaced (n int, note text) TABLESPACE ts",
		"INSERT INTO spaced SELECT g, md5(g::text) FROM generate_series(1, 5000) g",
		"CREATE TABLE gone AS SELECT g AS x FROM generate_series(1, 20000) g",
		"CREATE TABLE shrink AS SELECT g AS x, md5(g::text) AS pad FROM generate_series(1, 50000) g",
		"CREATE TABLE marks (n serial, note text)",
	} {
		pg.psql(t, 5432, sql)
	}
	pg.mustSh(t, "pgbench -h /var/run/postgresql -U pipe -i -s 4 -q app")

	port, err := pg.c.MappedPort(ctx, "5432/tcp")
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	writeFile(t, filepath.Join(host, "base.hcl"), []byte(strings.Replace(walFile, "ASYNC", "false", 1)+incrementalBaseFile))
	env := b.env(bucket, b.m.Endpoint, "PIPE_VAR_keys="+keys, "PIPE_VAR_keep=30",
		fmt.Sprintf("PIPE_VAR_pg_dsn=postgres://pipe:%s@localhost:%s/app?sslmode=disable", pgPassword, port.Port()))
	backup := func() *manifest.Manifest {
		t.Helper()
		start := time.Now()
		r := mustPipe(t, host, env, "run", "base.hcl")
		runs := baseRuns(t, b, bucket)
		m := runs[len(runs)-1]
		t.Logf("base backup %d (%s, %s stored) in %s %s", len(runs), m.Source["backup_type"], pipefile.HumanSize(stored(m)), time.Since(start).Round(time.Millisecond), strings.TrimSpace(r.Stderr))
		return m
	}
	// Changes between backups, each a mark; 2% of pgbench_accounts in
	// one key range, as the benchmark does.
	change := func(k int) {
		t.Helper()
		pg.psql(t, 5432, fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + %d WHERE aid BETWEEN %d AND %d", k, 1+(k-1)*8000, k*8000))
		pg.psql(t, 5432, fmt.Sprintf("INSERT INTO spaced SELECT g, 'k%d' FROM generate_series(1, 500) g", k))
		switch k {
		case 2:
			pg.psql(t, 5432, "CREATE TABLE fresh AS SELECT g AS x FROM generate_series(1, 3000) g")
		case 3:
			pg.psql(t, 5432, "DROP TABLE gone")
		case 4:
			pg.psql(t, 5432, "DELETE FROM shrink WHERE x > 1000")
			pg.psql(t, 5432, "VACUUM shrink") // truncates its file
		}
		pg.psql(t, 5432, fmt.Sprintf("INSERT INTO marks (note) VALUES ('k%d')", k))
	}

	full := backup()
	if full.Source["backup_type"] != "full" || !strings.Contains(full.Source["full_reason"], "no run to build on") || full.Listing == "" {
		t.Fatalf("the first run: backup_type %q, full_reason %q, listing of %d bytes", full.Source["backup_type"], full.Source["full_reason"], len(full.Listing))
	}
	chain := []*manifest.Manifest{full}
	var atTime string
	for k := 1; k <= 6; k++ {
		change(k)
		m := backup()
		parent := chain[len(chain)-1]
		if m.Source["backup_type"] != "incremental" || m.Source["parent_run"] != parent.RunID || m.Source["chain_length"] != fmt.Sprint(k) {
			t.Fatalf("incremental %d: facts %v, want parent %s", k, m.Source, parent.RunID)
		}
		if ratio := float64(stored(m)) / float64(stored(full)); ratio > 0.25 {
			t.Errorf("incremental %d stores %s, %.2f× the full's %s", k, pipefile.HumanSize(stored(m)), ratio, pipefile.HumanSize(stored(full)))
		}
		chain = append(chain, m)
		if k == 3 {
			// A moment between the third and the fourth incremental.
			pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('after3')")
			time.Sleep(1500 * time.Millisecond)
			atTime = pg.psql(t, 5432, "SELECT clock_timestamp()::text")
			time.Sleep(1500 * time.Millisecond)
		}
	}
	pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('end')")
	pg.archivedThrough(t)
	want := tableDigests(t, pg, 5432)
	wantSpaced := pg.psql(t, 5432, "SELECT count(*) FROM spaced")

	// pg_combinebackup of the runs chain[0..n], each restored raw (as
	// stored) and extracted, into /tmp/combined-<n>.
	combine := func(n int) string {
		t.Helper()
		var dirs []string
		for i := 0; i <= n; i++ {
			dir := fmt.Sprintf("/tmp/raw-%d-%d", n, i)
			name := fmt.Sprintf("raw-%d-%d", n, i)
			if err := pg.c.CopyToContainer(ctx, []byte(chainRestoreFile(dir, fmt.Sprintf("run = %q", chain[i].RunID), "")), "/etc/pipe/"+name+".hcl", 0o644); err != nil {
				t.Fatal(err)
			}
			pg.mustSh(t, "pipe run /etc/pipe/"+name+".hcl --pipeline raw")
			pg.mustSh(t, fmt.Sprintf("mkdir -p %[1]s/data && tar -xf %[1]s/base.tar -C %[1]s/data && cp %[1]s/backup_manifest %[1]s/data/", dir))
			dirs = append(dirs, dir+"/data")
		}
		out := fmt.Sprintf("/tmp/combined-%d", n)
		// Its tablespace is in tablespace_map, not linked from
		// pg_tblspc: pg_combinebackup composes the data directory.
		pg.mustSh(t, fmt.Sprintf("pg_combinebackup -o %s %s", out, strings.Join(dirs, " ")))
		return out
	}
	// sameFiles compares every file of two data directories but those a
	// restore writes for recovery (and the manifests' layout).
	sameFiles := func(what, a, b string) {
		t.Helper()
		sums := func(dir string) string {
			return pg.mustSh(t, "cd "+dir+" && find . -type f ! -name postgresql.auto.conf ! -name backup_manifest ! -name recovery.signal ! -name tablespace_map -print0 | sort -z | xargs -0 sha256sum")
		}
		sa, sb := sums(a), sums(b)
		if sa != sb {
			t.Errorf("%s: the files of %s and %s differ:\n%s", what, a, b, firstDiff(sa, sb))
		}
		if n := strings.Count(sa, "\n"); n < 500 {
			t.Errorf("%s: only %d files compared", what, n)
		}
	}
	restoreChain := func(name, source, settings string) string {
		t.Helper()
		dir := "/tmp/" + name
		if err := pg.c.CopyToContainer(ctx, []byte(chainRestoreFile(dir, source, settings)), "/etc/pipe/"+name+".hcl", 0o644); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		pg.mustSh(t, "pipe run /etc/pipe/"+name+".hcl --pipeline chain")
		t.Logf("restore %s in %s", name, time.Since(start).Round(time.Millisecond))
		return dir
	}

	// The newest run: the whole chain, composed.
	dir := restoreChain("chain6", "", "")
	sameFiles("full + 6", dir, combine(6))
	if code, out := pg.sh(t, "pg_verifybackup --no-parse-wal --ignore=tablespace_map "+dir); code != 0 || !strings.Contains(out, "successfully verified") {
		t.Errorf("pg_verifybackup of the composed chain: exit %d\n%s", code, out)
	}
	pg.startRestored(t, dir, 5441, "")
	if got := tableDigests(t, pg, 5441); got != want {
		t.Errorf("the chain recovered to the end of the archive differs from the source:\n%s", firstDiff(want, got))
	}
	if got := pg.psql(t, 5441, "SELECT count(*) FROM spaced"); got != wantSpaced {
		t.Errorf("the tablespace's table holds %s rows, want %s", got, wantSpaced)
	}
	pg.mustSh(t, "pg_ctl -D "+dir+" -m fast -w stop")

	// A time between the third and the fourth incremental: the full and
	// three incrementals, composed, recovered to exactly the rows then.
	dir = restoreChain("chain3", "", fmt.Sprintf("recovery_target_time = %q\n    recovery_target_action = \"promote\"", atTime))
	sameFiles("full + 3", dir, combine(3))
	pg.startRestored(t, dir, 5442, "")
	if got := pg.psql(t, 5442, "SELECT string_agg(note, ',' ORDER BY n) FROM marks"); got != "k1,k2,k3,after3" {
		t.Errorf("recovered to a time between incrementals 3 and 4: marks holds %q", got)
	}
	pg.mustSh(t, "pg_ctl -D "+dir+" -m fast -w stop")

	// delete refuses to orphan the runs that build on a run.
	r := runPipe(t, host, env, "backups", "delete", "base.hcl", chain[2].RunID)
	if r.Err == nil || !strings.Contains(r.Stderr, chain[6].RunID) || !strings.Contains(r.Stderr, "--chain") {
		t.Errorf("deleting a parent: %v\n%s", r.Err, r.Stderr)
	}
	r = mustPipe(t, host, env, "backups", "delete", "base.hcl", chain[2].RunID, "--chain", "--dry-run")
	for _, m := range chain[2:] {
		if !strings.Contains(r.Stdout, "would delete run "+m.RunID) {
			t.Errorf("delete --chain --dry-run of %s does not list %s:\n%s", chain[2].RunID, m.RunID, r.Stdout)
		}
	}

	// A parent's object gone: verify of the newest run names it, and the
	// next run is a full that says why.
	var lost string
	for _, k := range b.keys(t, bucket, "base/"+chain[2].RunID+"/") {
		if strings.Contains(k, "base.tar") {
			lost = k
		}
	}
	if _, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: &lost}); err != nil {
		t.Fatal(err)
	}
	r = runPipe(t, host, env, "verify", "base.hcl")
	if r.Err == nil || !strings.Contains(r.Stdout, chain[2].RunID) || !strings.Contains(r.Stdout, "needed by run "+chain[6].RunID) {
		t.Errorf("verify of a chain whose run lost an object: %v\n%s", r.Err, r.Stdout)
	}
	m := backup()
	if m.Source["backup_type"] != "full" || !strings.Contains(m.Source["full_reason"], chain[2].RunID) {
		t.Errorf("a run after a parent's object went: backup_type %q, full_reason %q", m.Source["backup_type"], m.Source["full_reason"])
	}

	// Without WAL summaries the server cannot: a full, and a notice.
	m = backup()
	if m.Source["backup_type"] != "incremental" {
		t.Errorf("the run after a new full: backup_type %q (%s)", m.Source["backup_type"], m.Source["full_reason"])
	}
	pg.psql(t, 5432, "ALTER SYSTEM SET summarize_wal = off")
	pg.psql(t, 5432, "SELECT pg_reload_conf()")
	r = mustPipe(t, host, env, "run", "base.hcl")
	runs := baseRuns(t, b, bucket)
	m = runs[len(runs)-1]
	if m.Source["backup_type"] != "full" || !strings.Contains(m.Source["full_reason"], "summarize_wal is off") || !strings.Contains(r.Stderr, "summarize_wal is off") {
		t.Errorf("a run with summarize_wal = off: backup_type %q, full_reason %q\n%s", m.Source["backup_type"], m.Source["full_reason"], r.Stderr)
	}

	// Summaries on again: the summarizer goes on from where it stopped,
	// so the run taken while they were off is built on.
	pg.psql(t, 5432, "ALTER SYSTEM SET summarize_wal = on")
	pg.psql(t, 5432, "SELECT pg_reload_conf()")
	if m := backup(); m.Source["backup_type"] != "incremental" {
		t.Errorf("a run after summaries came back: backup_type %q (%s)", m.Source["backup_type"], m.Source["full_reason"])
	}
	// A parent the server refuses: its recorded WAL range ends past
	// where the next backup starts (as on an idle standby). pipe takes
	// a full instead, naming the server's reason.
	runs = baseRuns(t, b, bucket)
	newest := runs[len(runs)-1]
	var key string
	for _, k := range b.keys(t, bucket, "base/"+newest.RunID+"/") {
		if strings.HasSuffix(k, pipefile.ManifestName) {
			key = k
		}
	}
	raw, _ := b.get(bucket, key)
	b.put(t, bucket, key, []byte(strings.Replace(string(raw), `"stop_lsn": "`+newest.Source["stop_lsn"]+`"`, `"stop_lsn": "FF/0"`, 1)))
	m = backup()
	if m.Source["backup_type"] != "full" || !strings.Contains(m.Source["full_reason"], "the server cannot build on run "+newest.RunID) {
		t.Errorf("a run on a parent the server refuses: backup_type %q, full_reason %q", m.Source["backup_type"], m.Source["full_reason"])
	}
	if m := backup(); m.Source["backup_type"] != "incremental" {
		t.Errorf("the run after it: backup_type %q (%s)", m.Source["backup_type"], m.Source["full_reason"])
	}

	// The server recovered from the chain was promoted onto timeline 2:
	// backed up into the same store, as after a failover, it gets a full
	// (the newest run is on timeline 1), then incrementals on timeline 2.
	pg.startRestored(t, "/tmp/chain6", 5441, `"archive_mode = on" "archive_command = '`+archiveCommand[false]+`'"`)
	if err := pg.c.CopyToContainer(ctx, []byte(strings.Replace(walFile, "ASYNC", "false", 1)+incrementalBaseFile), "/etc/pipe/promoted.hcl", 0o644); err != nil {
		t.Fatal(err)
	}
	promoted := func() *manifest.Manifest {
		t.Helper()
		pg.mustSh(t, "PIPE_VAR_keep=30 PIPE_VAR_pg_dsn='postgres://pipe@/app?host=/var/run/postgresql&port=5441' pipe run /etc/pipe/promoted.hcl --pipeline base")
		runs := baseRuns(t, b, bucket)
		return runs[len(runs)-1]
	}
	if m := promoted(); m.Source["backup_type"] != "full" || !strings.Contains(m.Source["full_reason"], "moved to timeline") {
		t.Errorf("the first run of the promoted server: backup_type %q, full_reason %q", m.Source["backup_type"], m.Source["full_reason"])
	}
	if m := promoted(); m.Source["backup_type"] != "incremental" || m.Source["timeline"] == "1" {
		t.Errorf("the second run of the promoted server: backup_type %q on timeline %s (%s)", m.Source["backup_type"], m.Source["timeline"], m.Source["full_reason"])
	}

	// Prune with keep_last = 3 where the cut falls inside a chain: the
	// oldest kept run is an incremental, so its full stays with it, and
	// every other run goes, the chain whose run lost an object with it.
	runs = baseRuns(t, b, bucket)
	last := runs[len(runs)-3:]
	parent := runs[len(runs)-4]
	if last[0].Source["backup_type"] != "incremental" || last[0].Source["parent_run"] != parent.RunID {
		t.Fatalf("the third newest run %s: backup_type %q on %q, want an incremental on %s", last[0].RunID, last[0].Source["backup_type"], last[0].Source["parent_run"], parent.RunID)
	}
	env3 := append(append([]string(nil), env...), "PIPE_VAR_keep=3")
	dry := mustPipe(t, host, env3, "backups", "prune", "base.hcl", "--pipeline", "base", "--dry-run").Stdout
	if !strings.Contains(dry, "keep run "+parent.RunID) || !strings.Contains(dry, "run "+last[0].RunID+" builds on it") {
		t.Errorf("prune --dry-run does not keep %s for %s:\n%s", parent.RunID, last[0].RunID, dry)
	}
	done := mustPipe(t, host, env3, "backups", "prune", "base.hcl", "--pipeline", "base").Stdout
	would := strings.ReplaceAll(strings.Join(lines(dry, "would delete run "), "\n"), "would delete", "deleted")
	if did := strings.Join(lines(done, "deleted run "), "\n"); did != would || strings.Count(did, "\n")+1 != len(runs)-4 {
		t.Errorf("prune of %d runs with keep_last = 3 deleted\n%s\nits dry run said\n%s", len(runs), done, dry)
	}
	var left, want4 []string
	for _, m := range baseRuns(t, b, bucket) {
		left = append(left, m.RunID)
	}
	for _, m := range append([]*manifest.Manifest{parent}, last...) {
		want4 = append(want4, m.RunID)
	}
	if strings.Join(left, " ") != strings.Join(want4, " ") {
		t.Errorf("after prune the store holds runs %v, want %v", left, want4)
	}
	if r := runPipe(t, host, env, "verify", "base.hcl", "--pipeline", "base", "--all"); r.Err != nil {
		t.Errorf("verify after prune: %v\n%s%s", r.Err, r.Stdout, r.Stderr)
	}
	// The kept parent composes with its incremental.
	dir = restoreChain("pruned", fmt.Sprintf("run = %q", last[0].RunID), "")
	if code, out := pg.sh(t, "pg_verifybackup --no-parse-wal --ignore=tablespace_map "+dir); code != 0 || !strings.Contains(out, "successfully verified") {
		t.Errorf("pg_verifybackup of the chain kept by prune: exit %d\n%s", code, out)
	}
}
