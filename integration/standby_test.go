package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// standbyFile is run inside the container: base backups of the server on
// port PORT over its socket, read at rate at most, with the archive the
// primary pushes to.
func standbyFile(port int, prefix, rate string) string {
	return strings.Replace(walFile, "ASYNC", "false", 1) + fmt.Sprintf(`
pipeline "base" {
  rate_limit = "%s"
  source "postgres_basebackup" {
    dsn = "host=/var/run/postgresql port=%d user=pipe dbname=app"
  }
  compress {}
  encrypt { recipients = [file("${var.keys}/wal.pub")] }
  `+s3Block("sink", `key = "%s/${run.id}/${stream.name}${stream.ext}"`)+`
}
`, rate, port, prefix)
}

// TestBaseBackupStandbyAndDamage takes base backups where operators take
// them, and where the server is not well:
//   - from a streaming standby (sparing the primary): it recovers to the
//     same state as the primary, with the WAL the primary archives; a
//     promotion of the standby during the backup fails it, saying why,
//     and stores nothing;
//   - of a server with data checksums and a damaged page (PostgreSQL 18
//     turns checksums on by default): the server sends everything and
//     then fails the backup; pipe stores the run flagged as damaged,
//     naming the file and block, exits 1, and so does verify; pipe
//     backups lists it; the next run stores again.
func TestBaseBackupStandbyAndDamage(t *testing.T) {
	requireDocker(t)
	bucket := "standby"
	b, keys, env := walSetup(t, bucket)
	env["POSTGRES_INITDB_ARGS"] = "--data-checksums"
	pg := startWALCluster(t, "standby", false, env, keys)
	ctx := context.Background()
	put := func(name, text string) {
		t.Helper()
		if err := pg.c.CopyToContainer(ctx, []byte(text), "/etc/pipe/"+name, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pg.mustSh(t, "pgbench -h /var/run/postgresql -U pipe -i -s 4 -q app")
	pg.psql(t, 5432, "CREATE TABLE marks (note text, at timestamptz DEFAULT clock_timestamp()); INSERT INTO marks (note) VALUES ('before')")

	t.Run("from a standby", func(t *testing.T) {
		// A streaming standby of the primary, in the same container.
		pg.mustSh(t, "pg_basebackup -h /var/run/postgresql -U pipe -D /tmp/standby -R -X stream -c fast && "+
			"pg_ctl -D /tmp/standby -o '-p 5433' -l /tmp/standby.log -w -t 120 start")
		for pg.psql(t, 5433, "SELECT pg_is_in_recovery()") != "t" {
			time.Sleep(100 * time.Millisecond)
		}
		load := make(chan string, 1)
		go func() {
			_, out := pg.sh(t, "pgbench -h /var/run/postgresql -U pipe -c 2 -T 6 app")
			load <- out
		}()
		time.Sleep(time.Second)
		put("standby.hcl", standbyFile(5433, "standby", "1GiB/s"))
		if code, out := pg.sh(t, "pipe run /etc/pipe/standby.hcl"); code != 0 {
			t.Fatalf("a base backup from the standby: exit %d\n%s", code, out)
		}
		if out := <-load; !strings.Contains(out, "transactions actually processed") {
			t.Fatalf("pgbench: %s", out)
		}
		pg.psql(t, 5432, "INSERT INTO marks (note) VALUES ('after')")
		m := b.readManifest(t, bucket, "standby/")
		if m.Source["start_lsn"] == "" || m.Source["stop_lsn"] == "" {
			t.Fatalf("the standby's backup records no WAL range: %v", m.Source)
		}
		// The WAL it needs comes from the primary's archive.
		pg.archivedThrough(t)
		want := tableDigests(t, pg, 5432)
		put("from-standby.hcl", strings.Replace(pitrFile("/tmp/from-standby", ""), `prefix = "base/"`, `prefix = "standby/"`, 1))
		pg.mustSh(t, "pipe run /etc/pipe/from-standby.hcl")
		pg.mustSh(t, "printf '%s\\n' 'port = 5444' >> /tmp/from-standby/postgresql.auto.conf && pg_ctl -D /tmp/from-standby -l /tmp/from-standby.log -w -t 300 start")
		deadline := time.Now().Add(3 * time.Minute)
		for pg.psql(t, 5444, "SELECT pg_is_in_recovery()") != "f" {
			if time.Now().After(deadline) {
				t.Fatalf("the standby's backup is still recovering after 3 minutes:\n%s", pg.mustSh(t, "tail -30 /tmp/from-standby.log"))
			}
			time.Sleep(200 * time.Millisecond)
		}
		if got := tableDigests(t, pg, 5444); got != want {
			t.Errorf("recovered from the standby's backup:\n%s\nthe primary:\n%s", got, want)
		}
		pg.mustSh(t, "pg_ctl -D /tmp/from-standby -m fast -w stop")

		// Promoted while a backup of it runs (read at 8 MiB/s): the
		// backup fails with the server's reason, and leaves no run.
		put("slow.hcl", standbyFile(5433, "promoted", "8MiB/s"))
		done := make(chan struct{})
		var code int
		var out string
		go func() {
			defer close(done)
			code, out = pg.sh(t, "pipe run /etc/pipe/slow.hcl")
		}()
		time.Sleep(2 * time.Second)
		pg.mustSh(t, "pg_ctl -D /tmp/standby -w promote")
		<-done
		if code == 0 || !strings.Contains(out, "the standby was promoted during online backup") || !strings.Contains(out, "nothing was stored; take the backup again") {
			t.Errorf("a backup of a standby promoted meanwhile: exit %d\n%s", code, lastLines(out, 10))
		}
		if keys := b.keys(t, bucket, "promoted/"); len(keys) != 0 {
			t.Errorf("the failed backup left %v", keys)
		}
		pg.mustSh(t, "pg_ctl -D /tmp/standby -m immediate -w stop")
	})

	t.Run("a damaged page", func(t *testing.T) {
		// Damage page 0 of a table on disk, past its header (a page
		// whose LSN is newer than the backup's start is not checked):
		// the server reads it from the file, not from its buffers.
		pg.psql(t, 5432, "CREATE TABLE victim AS SELECT g, md5(g::text) FROM generate_series(1, 1000) g; CHECKPOINT")
		file := pg.psql(t, 5432, "SELECT pg_relation_filepath('victim')")
		pg.mustSh(t, fmt.Sprintf("printf 'damaged by the test' | dd of=%s/%s bs=1 seek=4000 conv=notrunc status=none", pgData, file))
		put("damaged.hcl", standbyFile(5432, "damaged", "1GiB/s"))
		code, out := pg.sh(t, "pipe run /etc/pipe/damaged.hcl --metrics-textfile /tmp/damaged.prom")
		if code != 1 || !strings.Contains(out, "DAMAGED") || !strings.Contains(out, "checksum verification failed in file") || !strings.Contains(out, "stored as run") {
			t.Fatalf("a backup with a damaged page: exit %d\n%s", code, lastLines(out, 15))
		}
		if !strings.Contains(pg.mustSh(t, "cat /tmp/damaged.prom"), `pipe_run_damaged{pipeline="base"} 1`) {
			t.Errorf("no pipe_run_damaged metric:\n%s", pg.mustSh(t, "grep damaged /tmp/damaged.prom; true"))
		}
		m := b.readManifest(t, bucket, "damaged/")
		block := strings.TrimPrefix(file, "base/")
		if !m.Damaged() || !strings.Contains(m.Damage, block) || !strings.Contains(m.Damage, "block 0") || m.Source["stop_lsn"] == "" {
			t.Fatalf("the damaged run's manifest: damage %q, facts %v", m.Damage, m.Source)
		}
		if _, list := pg.sh(t, "pipe backups /etc/pipe/damaged.hcl"); !strings.Contains(list, "DAMAGED run "+m.RunID) {
			t.Errorf("pipe backups does not flag the run:\n%s", list)
		}
		if code, out := pg.sh(t, "pipe verify /etc/pipe/damaged.hcl"); code != 1 || !strings.Contains(out, "BAD DAMAGED") {
			t.Errorf("verify of the damaged run: exit %d\n%s", code, out)
		}
		// The next run stores again (and is flagged again: the page is
		// still damaged).
		if code, out := pg.sh(t, "pipe run /etc/pipe/damaged.hcl"); code != 1 || !strings.Contains(out, "stored as run") {
			t.Errorf("the next run: exit %d\n%s", code, lastLines(out, 10))
		}
		if n := strings.Count(strings.Join(b.keys(t, bucket, "damaged/"), "\n"), "pipe-manifest.json"); n != 2 {
			t.Errorf("%d runs stored after two damaged backups, want 2", n)
		}
	})
}
