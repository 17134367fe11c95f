package integration

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"

	"github.com/pipebackup/pipe/internal/binlogfile"
	"github.com/pipebackup/pipe/manifest"
)

// physicalFile backs up the server it runs beside with mariadb_backup,
// incrementals on, to MinIO, and restores the newest run (or the one
// var.run names) into var.target, to var.time or var.gtid when set; its
// archive holds the server's binlog.
var physicalFile = s3Vars + `
variable "password" { sensitive = true }
variable "target" { default = "/restore/data" }
variable "run" { default = "" }
variable "time" { default = "" }
variable "gtid" { default = "" }
variable "keys" { default = "/etc/pipe" }

archive "binlog" {
  ` + s3Block("store", `key = "binlog/"`) + `
  compress {}
  encrypt { recipients = [file("${var.keys}/backup.pub")] }
  decrypt { identities = [file("${var.keys}/backup.key")] }
  binlog {
    path    = "/var/lib/mysql/mysql-bin"
    max_lag = "500ms"
  }
}

pipeline "backup" {
  source "mariadb_backup" {
    socket      = "/run/mysqld/mysqld.sock"
    user        = "root"
    password    = var.password
    incremental = true
    full_every  = 4
  }
  compress {}
  encrypt { recipients = [file("${var.keys}/backup.pub")] }
  ` + s3Block("sink", `key = "physical/${run.id}/"`) + `
}

pipeline "restore" {
  ` + s3Block("source", `prefix = "physical/"
    run    = var.run`) + `
  decrypt { identities = [file("${var.keys}/backup.key")] }
  decompress {}
  sink "mariadb_backup" {
    data_directory = var.target
    target         = var.time
    target_gtid    = var.gtid
    binlog_fetch   = "pipe binlog fetch /etc/pipe/fetch.hcl %f %p"
  }
}
`

// startPhysicalMariaDB starts MariaDB of version with the binlog on,
// pipe and physicalFile inside, and the keys in keys.
func startPhysicalMariaDB(t *testing.T, version, keys string) *mariaServer {
	t.Helper()
	return startMariaDB(t, version,
		testcontainers.WithFiles(
			testcontainers.ContainerFile{HostFilePath: staticPipe(t), ContainerFilePath: "/usr/local/bin/pipe", FileMode: 0o755},
			testcontainers.ContainerFile{Reader: strings.NewReader(physicalFile), ContainerFilePath: "/etc/pipe/physical.hcl", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: filepath.Join(keys, "backup.pub"), ContainerFilePath: "/etc/pipe/backup.pub", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: filepath.Join(keys, "backup.key"), ContainerFilePath: "/etc/pipe/backup.key", FileMode: 0o644},
		),
		testcontainers.WithCmdArgs("--log-bin=mysql-bin", "--server-id=1", "--binlog-format=ROW"))
}

// physicalPipe runs a pipeline of physicalFile in the container.
func (m *mariaServer) physicalPipe(t *testing.T, b *s3Bench, bucket, pipeline string, vars ...string) (int, string) {
	t.Helper()
	env := b.env(bucket, "http://"+b.m.IP+":9000", "PIPE_VAR_password="+mariaRootPassword)
	for _, v := range vars {
		env = append(env, "PIPE_VAR_"+v)
	}
	return m.inside(t, env, "pipe", "run", "/etc/pipe/physical.hcl", "--pipeline", pipeline)
}

func (m *mariaServer) mustPhysical(t *testing.T, b *s3Bench, bucket, pipeline string, vars ...string) string {
	t.Helper()
	code, out := m.physicalPipe(t, b, bucket, pipeline, vars...)
	if code != 0 {
		t.Fatalf("pipe run --pipeline %s %v: exit %d\n%s", pipeline, vars, code, out)
	}
	return out
}

// writer inserts rows, one transaction each, until stopped: the steady
// writes a backup runs under.
type writer struct {
	cmd  *exec.Cmd
	in   io.WriteCloser
	rows atomic.Int64
	stop chan struct{}
	done sync.WaitGroup
}

// startWriter runs create (if any), then statement(1), statement(2), …
// every interval in one session until the writer ends.
func (m *mariaServer) startWriter(t *testing.T, create string, interval time.Duration, statement func(i int64) string) *writer {
	t.Helper()
	if create != "" {
		m.sql(t, create)
	}
	cmd := exec.Command(m.client, "--defaults-extra-file="+m.cnf, "--batch", "shop")
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &writer{cmd: cmd, in: in, stop: make(chan struct{})}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		bw := bufio.NewWriter(in)
		for i := int64(1); ; i++ {
			select {
			case <-w.stop:
				return
			case <-time.After(interval):
			}
			fmt.Fprintln(bw, statement(i))
			if bw.Flush() != nil {
				return
			}
			w.rows.Store(i)
		}
	}()
	t.Cleanup(func() { w.end(t) })
	return w
}

// end stops the writer and waits until the server ran every insert.
func (w *writer) end(t *testing.T) {
	select {
	case <-w.stop:
		return
	default:
	}
	close(w.stop)
	w.done.Wait()
	w.in.Close()
	if err := w.cmd.Wait(); err != nil {
		t.Errorf("the writer: %v", err)
	}
}

// gtidSeq is the sequence number of domain 0 in a GTID position.
func gtidSeq(t *testing.T, pos string) int64 {
	t.Helper()
	for _, g := range strings.Split(pos, ",") {
		if parts := strings.Split(g, "-"); len(parts) == 3 && parts[0] == "0" {
			n, err := strconv.ParseInt(parts[2], 10, 64)
			if err == nil {
				return n
			}
		}
	}
	t.Fatalf("GTID position %q has no domain 0", pos)
	return 0
}

// physicalRuns are the manifests of the bucket's physical backups,
// oldest first.
func physicalRuns(t *testing.T, b *s3Bench, bucket string) []*manifest.Manifest {
	t.Helper()
	return runsUnder(t, b, bucket, "physical/")
}

// startRestored starts a second server in the container on dir, at
// port, and returns its client's command line prefix.
func (m *mariaServer) startRestored(t *testing.T, dir string, port int) []string {
	t.Helper()
	sock := fmt.Sprintf("/tmp/restored-%d.sock", port)
	m.mustInside(t, "sh", "-c", fmt.Sprintf("(mariadbd --datadir=%s --port=%d --socket=%s --user=mysql --skip-log-bin --pid-file=/tmp/restored-%d.pid > /tmp/restored-%d.log 2>&1 &)", dir, port, sock, port, port))
	client := []string{"mariadb", "-uroot", "-p" + mariaRootPassword, "-S", sock, "--batch", "--skip-column-names"}
	for i := 0; ; i++ {
		if code, _ := m.inside(t, nil, append(client, "-e", "SELECT 1")...); code == 0 {
			return client
		}
		if i == 60 {
			_, log := m.inside(t, nil, "cat", fmt.Sprintf("/tmp/restored-%d.log", port))
			t.Fatalf("the restored server on %s did not start:\n%s", dir, log)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (m *mariaServer) mustInside(t *testing.T, argv ...string) string {
	t.Helper()
	code, out := m.inside(t, nil, argv...)
	if code != 0 {
		t.Fatalf("%v: exit %d\n%s", argv, code, out)
	}
	return out
}

// TestMariaDBPhysical: under steady writes, a full and an incremental
// backup of MariaDB 10.11 through pipe's stages to S3; the chain's
// restore prepares a data directory a server starts on, with every
// table as the source had it at the incremental's binlog position.
func TestMariaDBPhysical(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	keys := t.TempDir()
	mustPipe(t, keys, nil, "keygen", "-o", "backup")
	b := newS3Bench(t)
	bucket := b.bucket(t, "physical")
	m := startPhysicalMariaDB(t, "10.11", keys)

	// 400,000 rows of about 100 bytes: some 60 MB of InnoDB.
	m.sql(t, "CREATE TABLE shop.big (id INT PRIMARY KEY, k INT, pad CHAR(90), KEY (k)) ENGINE=InnoDB; "+
		"INSERT INTO shop.big SELECT seq, seq % 1000, SHA2(seq, 256) FROM shop.seq_1_to_400000")
	base := gtidSeq(t, m.sql(t, "SELECT @@gtid_binlog_pos"))
	w := m.startWriter(t, "CREATE TABLE shop.w (id BIGINT PRIMARY KEY, v VARCHAR(40)) ENGINE=InnoDB", 2*time.Millisecond,
		func(i int64) string { return fmt.Sprintf("INSERT INTO w VALUES (%d, 'row %d');", i, i) })
	time.Sleep(time.Second)

	out := m.mustPhysical(t, b, bucket, "backup")
	t.Log(out)
	// 2% of big changes between the full and the incremental: one
	// transaction (base+1 is the writer's CREATE TABLE).
	m.sql(t, "UPDATE shop.big SET pad = SHA2(CONCAT('changed', id), 256) WHERE id % 50 = 0")
	time.Sleep(time.Second)
	m.mustPhysical(t, b, bucket, "backup")
	time.Sleep(500 * time.Millisecond)
	w.end(t)
	if w.rows.Load() < 100 {
		t.Fatalf("the writer wrote %d rows: no steady writes", w.rows.Load())
	}

	runs := physicalRuns(t, b, bucket)
	if len(runs) != 2 {
		t.Fatalf("%d runs, want 2", len(runs))
	}
	full, inc := runs[0], runs[1]
	if full.RunID > inc.RunID {
		full, inc = inc, full
	}
	if full.Source["backup_type"] != "full" || inc.Source["backup_type"] != "incremental" || inc.Source["parent_run"] != full.RunID {
		t.Fatalf("the runs are not a full and an incremental on it: %v / %v", full.Source, inc.Source)
	}
	for _, r := range []*manifest.Manifest{full, inc} {
		for _, k := range []string{"binlog_file", "binlog_position", "gtid_position", "innodb_to_lsn", "server_version"} {
			if r.Source[k] == "" {
				t.Errorf("run %s records no %s: %v", r.RunID, k, r.Source)
			}
		}
	}
	if inc.Objects[0].OriginalSize >= full.Objects[0].OriginalSize/2 {
		t.Errorf("the incremental read %d bytes, the full %d: not an incremental", inc.Objects[0].OriginalSize, full.Objects[0].OriginalSize)
	}
	// Every object's digest, without the key.
	if code, out := m.inside(t, b.env(bucket, "http://"+b.m.IP+":9000", "PIPE_VAR_password=x"), "pipe", "verify", "/etc/pipe/physical.hcl", "--pipeline", "backup", "--all"); code != 0 {
		t.Fatalf("pipe verify: exit %d\n%s", code, out)
	}

	// A data directory that holds anything is refused.
	m.mustInside(t, "sh", "-c", "mkdir -p /restore/busy && touch /restore/busy/keep")
	if code, out := m.physicalPipe(t, b, bucket, "restore", "target=/restore/busy"); code == 0 || !strings.Contains(out, "is not empty") {
		t.Fatalf("a restore into a directory that is not empty: exit %d\n%s", code, out)
	}

	m.mustPhysical(t, b, bucket, "restore")
	if owner := strings.TrimSpace(m.mustInside(t, "stat", "-c", "%U", "/restore/data/ibdata1")); owner != "mysql" {
		t.Errorf("the restored files belong to %s, not mysql", owner)
	}
	if out := m.mustInside(t, "ls", "-a", "/restore"); strings.Contains(out, "pipe-incremental") {
		t.Errorf("the incremental's folder was left behind: %s", out)
	}
	client := m.startRestored(t, "/restore/data", 3307)
	q := func(sql string) string {
		return strings.TrimSpace(m.mustInside(t, append(client, "-e", sql)...))
	}
	if got, want := q("CHECKSUM TABLE shop.big"), m.sql(t, "CHECKSUM TABLE shop.big"); got != want {
		t.Errorf("restored big: %q, the source's %q", got, want)
	}
	// The writer's rows are exactly those committed up to the binlog
	// position the incremental recorded: 1..n without a gap.
	n := gtidSeq(t, inc.Source["gtid_position"]) - base - 2
	if got := q("SELECT COUNT(*), IFNULL(MIN(id), 0), IFNULL(MAX(id), 0) FROM shop.w"); got != fmt.Sprintf("%d\t%d\t%d", n, min(n, 1), n) {
		t.Errorf("restored w: count, min, max %q; the incremental's GTID %s says %d rows", got, inc.Source["gtid_position"], n)
	}
	if n < 10 {
		t.Errorf("the incremental holds %d of the writer's rows: the writes were not steady", n)
	}
}

// fetchFile is the binlog archive of physicalFile with its settings
// written out: binlog_fetch runs in the restore's environment, which
// holds none of pipe's variables.
func fetchFile(b *s3Bench, bucket string) string {
	return fmt.Sprintf(`archive "binlog" {
  store "s3" {
    bucket            = %q
    key               = "binlog/"
    endpoint          = "http://%s:9000"
    path_style        = true
    access_key_id     = %q
    secret_access_key = %q
  }
  compress {}
  decrypt { identities = [file("/etc/pipe/backup.key")] }
  binlog { path = "/var/lib/mysql/mysql-bin" }
}
`, bucket, b.m.IP, b.m.User, b.m.Pass)
}

// pitrWriter inserts rows 1, 2, … into shop.p, each its own transaction
// stamped with NOW(), until stopped. Row n is the transaction of GTID
// 0-1-(base+n).
func (m *mariaServer) pitrWriter(t *testing.T) (w *writer, base int64) {
	t.Helper()
	m.sql(t, "CREATE TABLE shop.p (id BIGINT PRIMARY KEY, ts DATETIME NOT NULL) ENGINE=InnoDB")
	base = gtidSeq(t, m.sql(t, "SELECT @@gtid_binlog_pos"))
	w = m.startWriter(t, "", 15*time.Millisecond, func(i int64) string { return fmt.Sprintf("INSERT INTO p VALUES (%d, NOW());", i) })
	return w, base
}

// commitStamps reads the server's binlog (every file in its index):
// each GTID sequence of domain 0, and the time of its transaction's
// newest event, its commit. A row's ts is its statement's start; from
// MariaDB 11 on, its commit (Xid) event carries the commit's own time,
// which can fall in the next second.
func (m *mariaServer) commitStamps(t *testing.T) map[int64]time.Time {
	t.Helper()
	out := m.mustInside(t, "sh", "-c", "cd /var/lib/mysql && TZ=UTC mariadb-binlog --no-defaults $(cat mysql-bin.index) 2>/dev/null | grep -E '^#[0-9]{6} '")
	stamps := map[int64]time.Time{}
	var seq int64
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		ts, err := time.Parse("060102 15:04:05", strings.TrimPrefix(f[0], "#")+" "+f[1])
		if err != nil {
			t.Fatalf("a binlog event header %q: %v", line, err)
		}
		if i := slices.Index(f, "GTID"); i >= 0 && i+1 < len(f) && strings.HasPrefix(f[i+1], "0-") {
			seq = gtidSeq(t, f[i+1])
		}
		if ts.After(stamps[seq]) {
			stamps[seq] = ts
		}
	}
	return stamps
}

// committedBy is what a time target of the second at (the server's
// "2006-01-02 15:04:05") must restore of shop.p, as "count\tmax id": the
// rows whose transaction the binlog stamps (commitStamps, read after the
// writes ended) at or before that second; one whose statement began in
// it but committed later committed after the target. Rows are 1, 2, … in
// GTID order from base on (pitrWriter).
func (m *mariaServer) committedBy(t *testing.T, stamps map[int64]time.Time, at string, base int64) string {
	t.Helper()
	second, err := time.Parse("2006-01-02 15:04:05", at)
	if err != nil {
		t.Fatal(err)
	}
	row, err := strconv.ParseInt(m.sql(t, fmt.Sprintf("SELECT IFNULL(MAX(id), 0) FROM shop.p WHERE ts <= '%s'", at)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	for row > 0 && stamps[base+row].After(second) {
		row--
	}
	if _, ok := stamps[base+row]; row > 0 && !ok {
		t.Fatalf("the server's binlog holds no GTID 0-1-%d, row %d's", base+row, row)
	}
	return fmt.Sprintf("%d\t%d", row, row)
}

// pitrSetup is a MariaDB server with the binlog on and pipe inside, a
// bucket, the keys, and the binlog_fetch file written out.
type pitrSetup struct {
	m      *mariaServer
	b      *s3Bench
	bucket string
	keys   string   // the folder of backup.key and backup.pub
	env    []string // of pipe runs in the container
}

func startPITR(t *testing.T, version string) *pitrSetup {
	t.Helper()
	p := &pitrSetup{keys: t.TempDir(), b: newS3Bench(t)}
	mustPipe(t, p.keys, nil, "keygen", "-o", "backup")
	p.bucket = p.b.bucket(t, "pitr")
	p.m = startPhysicalMariaDB(t, version, p.keys)
	if err := p.m.c.CopyToContainer(context.Background(), []byte(fetchFile(p.b, p.bucket)), "/etc/pipe/fetch.hcl", 0o600); err != nil {
		t.Fatal(err)
	}
	p.env = p.b.env(p.bucket, "http://"+p.b.m.IP+":9000", "PIPE_VAR_password="+mariaRootPassword)
	return p
}

// startArchiver starts pipe binlog archive in the container, in the
// background.
func (p *pitrSetup) startArchiver(t *testing.T) {
	t.Helper()
	if code, out := p.m.inside(t, p.env, "sh", "-c", "pipe binlog archive /etc/pipe/physical.hcl >>/tmp/archiver.log 2>&1 &"); code != 0 {
		t.Fatalf("starting the archiver: %s", out)
	}
}

// TestMariaDBPITR: the binlog archived as the server writes it (the
// archiver killed and restarted along the way), a full and an
// incremental backup under steady writes, and ten recoveries to random
// moments and GTIDs, each holding exactly the transactions up to its
// target; then a crash of the server, after which the archive holds its
// last committed transaction.
func TestMariaDBPITR(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	ctx := context.Background()
	p := startPITR(t, "10.11")
	m, b, bucket, keys, env := p.m, p.b, p.bucket, p.keys, p.env
	startArchiver := func() { p.startArchiver(t) }
	m.sql(t, "CREATE TABLE shop.big (id INT PRIMARY KEY, pad CHAR(90)) ENGINE=InnoDB; "+
		"INSERT INTO shop.big SELECT seq, SHA2(seq, 256) FROM shop.seq_1_to_100000")
	w, base := m.pitrWriter(t)
	time.Sleep(2 * time.Second)
	m.mustPhysical(t, b, bucket, "backup")
	// The archiver killed twice while the server writes, and started again.
	for range 2 {
		time.Sleep(1500 * time.Millisecond)
		m.inside(t, nil, "pkill", "-9", "-f", "binlog archive")
		time.Sleep(300 * time.Millisecond)
		startArchiver()
	}
	m.sql(t, "FLUSH BINARY LOGS") // a rotation in the middle
	time.Sleep(time.Second)
	m.mustPhysical(t, b, bucket, "backup")
	time.Sleep(3 * time.Second)
	w.end(t)
	time.Sleep(2 * time.Second) // max_lag is 500ms
	total := w.rows.Load()

	runs := physicalRuns(t, b, bucket)
	if len(runs) != 2 || runs[1].Source["backup_type"] != "incremental" {
		t.Fatalf("want a full and an incremental, got %d runs", len(runs))
	}
	full, inc := runs[0], runs[1]
	// Every archived file is the server's, byte for byte.
	files := strings.Fields(m.mustInside(t, "sh", "-c", "cd /var/lib/mysql && ls mysql-bin.[0-9]*"))
	for _, f := range files {
		if code, out := m.inside(t, nil, "sh", "-c", fmt.Sprintf("pipe binlog fetch /etc/pipe/fetch.hcl %s /tmp/fetched && cmp /tmp/fetched /var/lib/mysql/%s", f, f)); code != 0 {
			t.Errorf("archived %s differs from the server's: %s\n%s", f, out, m.mustInside(t, "tail", "-20", "/tmp/archiver.log"))
		}
	}
	if code, out := m.inside(t, env, "pipe", "binlog", "verify", "/etc/pipe/physical.hcl", "--decrypt"); code != 0 {
		t.Fatalf("pipe binlog verify: exit %d\n%s", code, out)
	}

	// Targets: rows the source committed after the full's binlog
	// position. A time target holds every row of its second (and none
	// after); a GTID target rows up to its own.
	firstAfter := gtidSeq(t, full.Source["gtid_position"]) - base + 1
	// A time target picks the newest run that ended before it: rows
	// from two seconds after the full's end.
	fullEnd, err := time.Parse(time.RFC3339Nano, full.Source["stop_time"])
	if err != nil {
		t.Fatal(err)
	}
	firstTimed, _ := strconv.ParseInt(m.sql(t, fmt.Sprintf("SELECT MIN(id) FROM shop.p WHERE ts >= '%s'", fullEnd.Add(2*time.Second).UTC().Format("2006-01-02 15:04:05"))), 10, 64)
	// And not of the writes' last second: the archive reaches a time
	// target only with an event after its second.
	lastTimed, _ := strconv.ParseInt(m.sql(t, "SELECT MAX(id) FROM shop.p WHERE ts < (SELECT MAX(ts) FROM shop.p)"), 10, 64)
	if firstTimed == 0 || firstTimed >= lastTimed {
		t.Fatalf("no rows written between the full's end (%s) and the writes' last second", fullEnd)
	}
	incAt := gtidSeq(t, inc.Source["gtid_position"]) - base
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 36))
	stamps := m.commitStamps(t)
	for i := range 10 {
		vars := []string{"target=/restore/t" + strconv.Itoa(i)}
		var want string
		if i%2 == 0 {
			row := firstTimed + rng.Int64N(lastTimed-firstTimed+1)
			ts := m.sql(t, fmt.Sprintf("SELECT ts FROM shop.p WHERE id = %d", row))
			at, err := time.Parse("2006-01-02 15:04:05", ts)
			if err != nil {
				t.Fatal(err)
			}
			target := at.Add(time.Duration(rng.Int64N(int64(time.Second)))).Format("2006-01-02 15:04:05.000Z07:00")
			vars = append(vars, "time="+target)
			want = m.committedBy(t, stamps, ts, base)
		} else {
			row := firstAfter + rng.Int64N(total-firstAfter)
			g := fmt.Sprintf("0-1-%d", base+row)
			vars = append(vars, "gtid="+g)
			run := full.RunID
			if row > incAt {
				run = inc.RunID
			}
			vars = append(vars, "run="+run)
			want = fmt.Sprintf("%d\t%d", row, row)
		}
		out := m.mustPhysical(t, b, bucket, "restore", vars...)
		client := m.startRestored(t, "/restore/t"+strconv.Itoa(i), 3310+i)
		got := strings.TrimSpace(m.mustInside(t, append(client, "-e", "SELECT COUNT(*), MAX(id) FROM shop.p")...))
		if got != want {
			t.Errorf("recovery %d to %v: rows (count, max) %q, want %q\n%s", i, vars[1:], got, want, out)
		}
		t.Logf("recovery %d to %v: %q of %d rows", i, vars[1:], got, total)
		m.mustInside(t, append(client, "-e", "SHUTDOWN")...)
	}
	// A target past the archive's end fails, and leaves the directory
	// empty.
	code, out := m.physicalPipe(t, b, bucket, "restore", "target=/restore/late", "time="+time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	if code == 0 || !strings.Contains(out, "ends before the target") {
		t.Fatalf("a target past the archive: exit %d\n%s", code, out)
	}
	if left := strings.TrimSpace(m.mustInside(t, "sh", "-c", "ls -A /restore/late | head -3")); left != "" {
		t.Errorf("a failed recovery left %s", left)
	}

	// A crash: the server's last committed transaction is in the archive
	// although its binlog file was never closed.
	m.sql(t, "INSERT INTO shop.p VALUES (1000000, NOW())")
	last := gtidSeq(t, m.sql(t, "SELECT @@gtid_binlog_pos"))
	active := strings.Fields(m.sql(t, "SHOW MASTER STATUS"))[0]
	time.Sleep(1500 * time.Millisecond)
	timeout := time.Duration(0)
	if err := m.c.Stop(ctx, &timeout); err != nil { // SIGKILL at once
		t.Fatal(err)
	}
	hostEnv := b.env(bucket, b.m.Endpoint, "PIPE_VAR_password=x", "PIPE_VAR_keys="+keys)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "physical.hcl"), []byte(physicalFile), 0o600); err != nil {
		t.Fatal(err)
	}
	mustPipe(t, dir, hostEnv, "binlog", "fetch", "physical.hcl", active, "active")
	f, err := os.Open(filepath.Join(dir, "active"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var seen uint64
	if err := binlogfile.Scan(f, 0, func(e binlogfile.Event) bool {
		if e.Type == binlogfile.GTIDEvent && e.Domain == 0 {
			seen = max(seen, e.Seq)
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	if seen != uint64(last) {
		t.Errorf("the archive's copy of %s, the file the server wrote when it crashed, ends with GTID 0-1-%d, not the last committed 0-1-%d", active, seen, last)
	}
}

// TestMariaDBPhysicalVersions runs the physical backup's round trip on
// the oldest and the newest MariaDB pipe knows besides 10.11: the binlog
// archived, a full and an incremental under writes, the chain restored
// and a server started on it, then a recovery to a moment.
func TestMariaDBPhysicalVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	for _, v := range []string{"10.5", "11.8"} {
		t.Run(v, func(t *testing.T) { smokePhysical(t, v) })
	}
}

func smokePhysical(t *testing.T, version string) {
	p := startPITR(t, version)
	m, b, bucket := p.m, p.b, p.bucket
	p.startArchiver(t)
	w, base := m.pitrWriter(t)
	time.Sleep(time.Second)
	m.mustPhysical(t, b, bucket, "backup")
	time.Sleep(2 * time.Second)
	m.mustPhysical(t, b, bucket, "backup")
	time.Sleep(3 * time.Second)
	w.end(t)
	time.Sleep(2 * time.Second)
	runs := physicalRuns(t, b, bucket)
	if len(runs) != 2 || runs[1].Source["backup_type"] != "incremental" {
		t.Fatalf("want a full and an incremental, got %d runs", len(runs))
	}
	inc := runs[1]

	m.mustPhysical(t, b, bucket, "restore", "target=/restore/chain")
	client := m.startRestored(t, "/restore/chain", 3307)
	n := gtidSeq(t, inc.Source["gtid_position"]) - base
	if got, want := strings.TrimSpace(m.mustInside(t, append(client, "-e", "SELECT COUNT(*), IFNULL(MAX(id), 0) FROM shop.p")...)), fmt.Sprintf("%d\t%d", n, n); got != want {
		t.Errorf("the chain restored holds rows (count, max) %q; its GTID position says %q", got, want)
	}
	m.mustInside(t, append(client, "-e", "SHUTDOWN")...)

	end, err := time.Parse(time.RFC3339Nano, inc.Source["stop_time"])
	if err != nil {
		t.Fatal(err)
	}
	ts := m.sql(t, fmt.Sprintf("SELECT MIN(ts) FROM shop.p WHERE ts >= '%s' AND ts < (SELECT MAX(ts) FROM shop.p)", end.Add(time.Second).UTC().Format("2006-01-02 15:04:05")))
	at, err := time.Parse("2006-01-02 15:04:05", ts)
	if err != nil {
		t.Fatalf("no row to recover to after the incremental's end %s: %q", end, ts)
	}
	want := m.committedBy(t, m.commitStamps(t), ts, base)
	m.mustPhysical(t, b, bucket, "restore", "target=/restore/pitr", "time="+at.Add(300*time.Millisecond).Format(time.RFC3339Nano))
	client = m.startRestored(t, "/restore/pitr", 3308)
	if got := strings.TrimSpace(m.mustInside(t, append(client, "-e", "SELECT COUNT(*), MAX(id) FROM shop.p")...)); got != want {
		t.Errorf("recovered to %s: rows (count, max) %q, want %q", at, got, want)
	}
}
