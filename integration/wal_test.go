package integration

import (
	"archive/tar"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// The archive file PostgreSQL's commands and the test's own pipe use: the
// same archive block, with the endpoint, keys and a few knobs as
// variables.
const walFile = s3Vars + `
variable "keys" { default = "/etc/pipe" }
variable "sysid" { default = "" }
variable "fetch_retries" { default = 5 }
variable "background" { default = "auto" }
variable "spool" { default = "pg_wal/pipe-spool/push" }
archive "pg" {
  ` + `store "s3" {
    bucket            = var.bucket
    key               = "archive/"
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
    timeout           = var.timeout
    retries           = var.retries
  }
  compress {}
  encrypt { recipients = [file("${var.keys}/wal.pub")] }
  decrypt { identities = [file("${var.keys}/wal.key")] }
  segment_size      = "1MiB"
  system_identifier = var.sysid
  background        = var.background
  push {
    async   = ASYNC
    workers = 4
    spool   = var.spool
  }
  fetch {
    prefetch = 8
    retries  = var.fetch_retries
  }
}
`

const pgData = "/var/lib/postgresql/data"

// walCluster is a PostgreSQL container that archives with pipe.
type walCluster struct {
	name string
	c    testcontainers.Container
	// dir is its data directory when not pgData (postgres:18's is
	// /var/lib/postgresql/18/docker).
	dir string
}

// inside is the environment of a pipe in a container that reaches MinIO
// on the Docker network, for the file's variables and bucket: a new map
// each time (startWALCluster adds to it).
func (b *s3Bench) inside(bucket string) map[string]string {
	return map[string]string{
		"PIPE_VAR_endpoint": "http://" + b.m.IP + ":9000", "PIPE_VAR_bucket": bucket,
		"PIPE_VAR_access_key": b.m.User, "PIPE_VAR_secret_key": b.m.Pass, "AWS_EC2_METADATA_DISABLED": "true",
	}
}

// archiveCommand is PostgreSQL's archive_command, sync and async: the
// async cluster runs pipe-wal, which in the official image (PostgreSQL is
// PID 1: no background pusher) answers for the files an earlier push sent
// ahead and hands the other pushes to pipe. It runs from a folder where
// the pipe beside it is countedPipe, which notes every hand-over.
var archiveCommand = map[bool]string{false: "pipe wal push /etc/pipe/pg.hcl %p", true: "/usr/local/lib/counted/pipe-wal push /etc/pipe/pg.hcl %p"}

// countedPipe is a pipe that notes its arguments in /tmp/pipe-calls, then
// runs pipe with them.
const countedPipe = "#!/bin/sh\necho \"$*\" >> /tmp/pipe-calls\nexec /usr/local/bin/pipe \"$@\"\n"

// pipeCalls are the arguments of every counted pipe run, one line each.
func (w *walCluster) pipeCalls(t *testing.T) []string {
	t.Helper()
	return strings.Split(strings.TrimSpace(w.mustSh(t, "cat /tmp/pipe-calls")), "\n")
}

// literalWAL is walFile with literal archive, push and fetch settings,
// which pipe-wal needs to answer anything itself (it hands a file whose
// settings use variables to pipe whole): background and the push spool
// from env's PIPE_VAR_ values or their defaults, the system identifier
// from pg_control, 5 fetch retries.
func literalWAL(async bool, env map[string]string) string {
	return strings.NewReplacer("ASYNC", fmt.Sprint(async),
		"var.background", strconv.Quote(cmp.Or(env["PIPE_VAR_background"], "auto")),
		"var.spool", strconv.Quote(cmp.Or(env["PIPE_VAR_spool"], "pg_wal/pipe-spool/push")),
		"system_identifier = var.sysid", "", "var.fetch_retries", "5").Replace(walFile)
}

// startWALCluster starts postgres:15 with 1 MiB segments, archive_mode on
// and pipe (the binary under test, copied in) as archive_command, writing
// to MinIO on the Docker network; more customizes the container further.
func startWALCluster(t *testing.T, name string, async bool, env map[string]string, keys string, more ...testcontainers.ContainerCustomizer) *walCluster {
	t.Helper()
	ctx := context.Background()
	file := strings.Replace(walFile, "ASYNC", "false", 1)
	if async {
		file = literalWAL(true, env)
	}
	env["POSTGRES_INITDB_ARGS"] = strings.TrimSpace("--wal-segsize=1 " + env["POSTGRES_INITDB_ARGS"])
	opts := []testcontainers.ContainerCustomizer{tcpostgres.WithDatabase("app"), tcpostgres.WithUsername("pipe"),
		tcpostgres.WithPassword(pgPassword), tcpostgres.BasicWaitStrategies(),
		testcontainers.WithEnv(env),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{HostFilePath: pipeBin, ContainerFilePath: "/usr/local/bin/pipe", FileMode: 0o755},
			testcontainers.ContainerFile{HostFilePath: pipeWALBin, ContainerFilePath: "/usr/local/bin/pipe-wal", FileMode: 0o755},
			testcontainers.ContainerFile{HostFilePath: pipeWALBin, ContainerFilePath: "/usr/local/lib/counted/pipe-wal", FileMode: 0o755},
			testcontainers.ContainerFile{Reader: strings.NewReader(countedPipe), ContainerFilePath: "/usr/local/lib/counted/pipe", FileMode: 0o755},
			testcontainers.ContainerFile{Reader: strings.NewReader(file), ContainerFilePath: "/etc/pipe/pg.hcl", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: filepath.Join(keys, "wal.pub"), ContainerFilePath: "/etc/pipe/wal.pub", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: filepath.Join(keys, "wal.key"), ContainerFilePath: "/etc/pipe/wal.key", FileMode: 0o644},
		),
		testcontainers.WithCmdArgs("-c", "archive_mode=on", "-c", "archive_command="+archiveCommand[async],
			"-c", "wal_keep_size=4GB", "-c", "max_wal_size=4GB"),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.ShmSize = 256 << 20 })}
	// more comes last: a host config modifier there replaces the one above.
	c, err := tcpostgres.Run(ctx, postgresImage, append(opts, more...)...)
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatal(err)
	}
	return &walCluster{name: name, c: c}
}

// sh runs a shell command in the container as postgres, in the data
// directory, and returns its exit code and output.
func (w *walCluster) sh(t *testing.T, script string) (int, string) {
	t.Helper()
	code, r, err := w.c.Exec(context.Background(), []string{"sh", "-c", script}, tcexec.Multiplexed(),
		tcexec.WithUser("postgres"), tcexec.WithWorkingDir(cmp.Or(w.dir, pgData)))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	return code, string(out)
}

func (w *walCluster) mustSh(t *testing.T, script string) string {
	t.Helper()
	code, out := w.sh(t, script)
	if code != 0 {
		t.Fatalf("%s: %s: exit %d\n%s", w.name, script, code, out)
	}
	return out
}

func (w *walCluster) psql(t *testing.T, port int, sql string) string {
	t.Helper()
	return strings.TrimSpace(w.mustSh(t, fmt.Sprintf("psql -X -A -t -p %d -h /var/run/postgresql -U pipe -d app -c %q", port, sql)))
}

// archivedThrough waits until PostgreSQL has archived every segment
// before the current one, and returns the last one's name.
func (w *walCluster) archivedThrough(t *testing.T) string {
	t.Helper()
	return w.archivedOn(t, 5432, func() string {
		_, ps := w.sh(t, "ps -eo pid,ppid,stat,etime,args; cat /proc/loadavg; ls -la pg_wal/pipe-spool/push pg_wal/archive_status | tail -20; psql -X -h /var/run/postgresql -U pipe -d app -c 'select * from pg_stat_archiver'")
		return lastLines(w.logs(t), 60) + "\n" + ps
	})
}

// archivedOn is archivedThrough for the server on port; why says what
// went on when it does not happen in 3 minutes.
func (w *walCluster) archivedOn(t *testing.T, port int, why func() string) string {
	t.Helper()
	// The segment pg_switch_wal completes ends where it returns; with no
	// WAL since the last switch it completes none and returns the start of
	// the current one, so the byte before is in the last completed
	// segment either way. (pg_current_wal_lsn() - 1 named the current
	// segment when it held only its page header, which is never archived.)
	// PostgreSQL 13 subtracts from a pg_lsn only another: n is the byte
	// before as a number, spelled out as a pg_lsn again.
	want := w.psql(t, port, "SELECT pg_walfile_name((to_hex(floor(n / 4294967296)::bigint) || '/' || to_hex((n % 4294967296)::bigint))::pg_lsn) FROM (SELECT pg_switch_wal() - '0/0'::pg_lsn - 1 AS n) s")
	deadline := time.Now().Add(3 * time.Minute)
	for {
		last := w.psql(t, port, "SELECT coalesce(last_archived_wal, '') FROM pg_stat_archiver")
		if len(last) == 24 && last >= want {
			return want
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the server on port %d archived up to %q, not %s, in 3 minutes\n%s", w.name, port, last, want, why())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (w *walCluster) logs(t *testing.T) string {
	t.Helper()
	r, err := w.c.Logs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	return string(b)
}

// pgWAL copies the segments in pg_wal out of the container.
func (w *walCluster) pgWAL(t *testing.T) map[string][]byte {
	t.Helper()
	_, r, err := w.c.Exec(context.Background(), []string{"tar", "-C", pgData + "/pg_wal", "-cf", "-", "--exclude=pipe-spool", "--exclude=archive_status", "."},
		tcexec.WithUser("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	// Without Multiplexed, the stream carries Docker's 8-byte frame
	// headers: strip them.
	raw, _ := io.ReadAll(r)
	var stdout bytes.Buffer
	for len(raw) >= 8 {
		n := int(raw[4])<<24 | int(raw[5])<<16 | int(raw[6])<<8 | int(raw[7])
		if raw[0] == 1 {
			stdout.Write(raw[8 : 8+n])
		}
		raw = raw[8+n:]
	}
	out := map[string][]byte{}
	tr := tar.NewReader(&stdout)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg && len(path.Base(h.Name)) == 24 {
			b, _ := io.ReadAll(tr)
			out[path.Base(h.Name)] = b
		}
	}
	return out
}

// killPushers kills every pipe process in the container with SIGKILL,
// every interval, until stop is closed; it returns how many it killed.
func (w *walCluster) killPushers(t *testing.T, interval time.Duration, stop <-chan struct{}) func() int {
	var mu sync.Mutex
	kills := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(interval):
			}
			// By name: PostgreSQL's own processes show its command line,
			// archive_command included.
			code, r, err := w.c.Exec(context.Background(), []string{"pkill", "-9", "-e", "-x", "pipe"}, tcexec.Multiplexed())
			if err == nil && code == 0 {
				out, _ := io.ReadAll(r)
				mu.Lock()
				kills += strings.Count(string(out), "killed")
				mu.Unlock()
			}
		}
	}()
	return func() int {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return kills
	}
}

// TestWAL archives the WAL of two PostgreSQL 15 servers into one MinIO
// bucket with pipe as archive_command, one pushing one segment at a time
// and one in the background, while pgbench writes a few hundred segments
// and every pipe wal push is killed with SIGKILL now and then. Every
// segment must be archived once and come back byte-identical; a second
// push of the same segment is a notice and one of other content is
// refused; a missing segment is exit 1; a store that fails mid-fetch
// stops recovery instead of ending it early; a recovery from a base backup
// with pipe as restore_command (prefetching) reaches the last archived
// transaction; no secret reaches a PostgreSQL log.
func TestWAL(t *testing.T) {
	requireDocker(t)
	b := newS3Bench(t)
	bucket := b.bucket(t, "wal")
	keys := t.TempDir()
	mustPipe(t, keys, nil, "keygen", "-o", "wal")
	var clusters [2]*walCluster
	var wg sync.WaitGroup
	for i, async := range []bool{false, true} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i] = startWALCluster(t, map[bool]string{false: "sync", true: "async"}[async], async, b.inside(bucket), keys)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	syncPG := clusters[0]
	hostDir := t.TempDir()
	writeFile(t, filepath.Join(hostDir, "pg.hcl"), []byte(strings.Replace(walFile, "ASYNC", "false", 1)))
	hostEnv := b.env(bucket, b.m.Endpoint, "PIPE_VAR_keys="+keys)

	// A base backup of the sync cluster before the load: recovery replays
	// everything after it from the archive.
	syncPG.psql(t, 5432, "CREATE TABLE marker (note text)")
	syncPG.mustSh(t, "pg_basebackup -h /var/run/postgresql -U pipe -D /tmp/base -X none -c fast")

	// The load, with every pusher killed now and then.
	stop := make(chan struct{})
	var killed [2]func() int
	for i, c := range clusters {
		killed[i] = c.killPushers(t, 250*time.Millisecond, stop)
	}
	for _, c := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code, out := c.sh(t, "pgbench -h /var/run/postgresql -U pipe -i -s 16 -q app && pgbench -h /var/run/postgresql -U pipe -c 4 -T 10 app"); code != 0 {
				t.Errorf("%s: pgbench: exit %d\n%s\nPostgreSQL's log:\n%s", c.name, code, out, lastLines(c.logs(t), 40))
			}
		}()
	}
	wg.Wait()
	close(stop)
	syncPG.psql(t, 5432, "INSERT INTO marker VALUES ('the last transaction')")
	kills := killed[0]() + killed[1]()
	t.Logf("pipe wal push processes killed with SIGKILL during the load: %d", kills)
	if kills == 0 {
		t.Error("no pusher was killed during the load: the test proved nothing about kill -9")
	}

	for _, c := range clusters {
		t.Run(c.name, func(t *testing.T) {
			last := c.archivedThrough(t)
			sysid := c.psql(t, 5432, "SELECT system_identifier FROM pg_control_system()")
			env := append(hostEnv, "PIPE_VAR_sysid="+sysid)
			// Every segment from the first to the last, once.
			prefix := "archive/" + sysid + "/00000001/"
			count := map[string]int{}
			for _, k := range b.keys(t, bucket, prefix) {
				count[strings.SplitN(path.Base(k), "-", 2)[0]]++
			}
			var names []string
			for name := range count {
				names = append(names, name)
			}
			sort.Strings(names)
			if len(names) == 0 {
				t.Fatal("nothing archived")
			}
			// initdb's segments are not archived: the archive starts
			// with the first segment the server filled.
			first := names[0]
			n := 0
			for name := first; name <= last; name = nextSegment(name) {
				if count[name] != 1 {
					t.Errorf("%s is archived %d times", name, count[name])
				}
				n++
			}
			if n < 200 {
				t.Errorf("only %d segments archived; the load should write a few hundred", n)
			}
			t.Logf("%d segments archived, %s … %s", n, first, last)
			if c == clusters[1] {
				// pipe-wal answered for the files an earlier push sent
				// ahead: pipe pushed only some.
				pushes := 0
				for _, call := range c.pipeCalls(t) {
					if strings.HasPrefix(call, "wal push ") {
						pushes++
					}
				}
				t.Logf("pipe-wal handed %d of %d pushes to pipe", pushes, n)
				if pushes == 0 || pushes >= n {
					t.Errorf("pipe-wal handed %d of %d pushes to pipe, where it should answer for those sent ahead and hand over the others", pushes, n)
				}
				// A push marks the files it sent ahead done, but the
				// newest: PostgreSQL skips them, and its archiver's
				// statistics still reached the last segment (above).
				commands, err := strconv.Atoi(c.psql(t, 5432, "SELECT archived_count FROM pg_stat_archiver"))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("PostgreSQL ran archive_command %d times for %d segments", commands, n)
				if commands >= n {
					t.Errorf("PostgreSQL ran archive_command %d times for %d segments: the files pushed ahead were not marked done", commands, n)
				}
			}
			// Byte-identical after fetch, as restore_command fetches
			// them (with the prefetch spool).
			pgwal := c.pgWAL(t)
			fetchDir := filepath.Join(t.TempDir(), "pgdata")
			for name := first; name <= last; name = nextSegment(name) {
				want, ok := pgwal[name]
				if !ok {
					continue // recycled by PostgreSQL already
				}
				mustPipe(t, hostDir, env, "wal", "fetch", "pg.hcl", name, filepath.Join(hostDir, "RECOVERYXLOG"), "--pgdata", fetchDir)
				got, err := os.ReadFile(filepath.Join(hostDir, "RECOVERYXLOG"))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s fetched differs from pg_wal's", name)
				}
			}
			if len(pgwal) < n/2 {
				t.Errorf("only %d of %d segments were still in pg_wal to compare", len(pgwal), n)
			}
			// Same content again: exit 0, a notice; other content: refused.
			for pgwal[first] == nil || pgwal[nextSegment(first)] == nil {
				first = nextSegment(first)
			}
			out := c.mustSh(t, "pipe wal push /etc/pipe/pg.hcl pg_wal/"+first)
			if !strings.Contains(out, "archived already with the same content") {
				t.Errorf("a second push of %s said:\n%s", first, out)
			}
			code, out := c.sh(t, fmt.Sprintf("cp pg_wal/%s /tmp/%s && pipe wal push /etc/pipe/pg.hcl /tmp/%s", nextSegment(first), first, first))
			if code != 1 || !strings.Contains(out, "archived with other content") {
				t.Errorf("a push of other content under %s: exit %d\n%s", first, code, out)
			}
			r := mustPipe(t, hostDir, env, "wal", "fetch", "pg.hcl", first, filepath.Join(hostDir, "again"), "--pgdata", fetchDir)
			if got, _ := os.ReadFile(filepath.Join(hostDir, "again")); !bytes.Equal(got, pgwal[first]) {
				t.Errorf("the archive did not keep the original %s\n%s", first, r.Stderr)
			}
			// Not archived: exit 1.
			r = runPipe(t, hostDir, env, "wal", "fetch", "pg.hcl", "0000000100000000000FFFFF", filepath.Join(hostDir, "x"), "--pgdata", fetchDir)
			if exitStatus(r.Err) != 1 {
				t.Errorf("fetch of a segment not archived: %v\n%s", r.Err, r.Stderr)
			}
		})
	}

	// Both clusters' archives are whole: pipe wal verify reads every
	// object of both, decrypts and decodes it.
	r := mustPipe(t, hostDir, hostEnv, "wal", "verify", "pg.hcl", "--decrypt", "--json")
	var v struct {
		OK      bool `json:"ok"`
		Listing struct {
			Timelines []struct {
				SystemID string `json:"system_identifier"`
				Segments int    `json:"segments"`
				Gaps     []any  `json:"gaps"`
			} `json:"timelines"`
		} `json:"listing"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &v); err != nil {
		t.Fatal(err)
	}
	if !v.OK || len(v.Listing.Timelines) != 2 || v.Listing.Timelines[0].SystemID == v.Listing.Timelines[1].SystemID {
		t.Errorf("pipe wal verify: %s", r.Stdout)
	}

	t.Run("recovery stops when the store fails", func(t *testing.T) {
		// restore_command through Toxiproxy, which cuts every
		// connection after 2 KiB: each fetch breaks off mid-object.
		px := startToxiproxy(t, b.m.IP+":9000")
		if _, err := px.AddToxic("cut", "limit_data", "downstream", 1, toxiclient.Attributes{"bytes": 2048}); err != nil {
			t.Fatal(err)
		}
		restore := fmt.Sprintf("PIPE_VAR_endpoint=http://%s:8666 PIPE_VAR_retries=1 PIPE_VAR_timeout=5s PIPE_VAR_fetch_retries=1 pipe wal fetch /etc/pipe/pg.hcl %%f %%p", px.IP)
		out := syncPG.mustSh(t, recoveryScript("/tmp/r1", 5433, restore)+`pg_ctl -D /tmp/r1 -l /tmp/r1.log -w -t 120 start || true
sleep 2
cat /tmp/r1.log`)
		if !strings.Contains(out, "stopping recovery") || strings.Contains(out, "archive recovery complete") || strings.Contains(out, "selected new timeline") {
			t.Fatalf("with the store failing mid-fetch, recovery did not stop:\n%s", out)
		}
		syncPG.sh(t, "pg_ctl -D /tmp/r1 stop -m immediate")
		noSecret(t, "the failed recovery's log", out, b.m.Pass)
	})

	t.Run("recovery with prefetch", func(t *testing.T) {
		log := syncPG.recoverToEnd(t, "/tmp/r2", 5434, "pipe wal fetch /etc/pipe/pg.hcl %f %p --log-level info")
		spooled := strings.Count(log, "from=spool")
		t.Logf("recovery restored %d segments from the prefetch spool, %d from the store", spooled, strings.Count(log, "from=store"))
		if spooled == 0 || !strings.Contains(log, "archive recovery complete") {
			t.Errorf("recovery log:\n%s", lastLines(log, 30))
		}
		noSecret(t, "the recovery's log", log, b.m.Pass)
	})

	t.Run("recovery with pipe-wal and a background prefetcher", func(t *testing.T) {
		// pipe-wal fetch starts the prefetcher itself and takes each
		// segment from the spool: pipe runs beside it only for what the
		// spool cannot answer (history files, the end of the archive).
		// countedPipe counts the pipes run. PID 1 here is the sync
		// cluster's postmaster, which reaps the prefetchers; they exit 0,
		// which it ignores (TestWALSpoolFull's pusher does the same).
		literal := literalWAL(false, map[string]string{"PIPE_VAR_background": "always"})
		if err := syncPG.c.CopyToContainer(context.Background(), []byte(literal), "/etc/pipe/literal.hcl", 0o644); err != nil {
			t.Fatal(err)
		}
		log := syncPG.recoverToEnd(t, "/tmp/r3", 5435, "/usr/local/lib/counted/pipe-wal fetch /etc/pipe/literal.hcl %f %p")
		restored := regexp.MustCompile(`restored log file "([0-9A-F]{24})" from archive`).FindAllStringSubmatch(log, -1)
		newest := ""
		for _, m := range restored {
			newest = max(newest, m[1])
		}
		// pipe fetches a segment only past the end of the archive, where
		// pipe-wal hands the answer (exit 1, or a gap) over.
		calls := syncPG.pipeCalls(t)
		prefetchers, handed := 0, 0
		segmentFetch := regexp.MustCompile(`^wal fetch \S+ ([0-9A-F]{24}) `)
		for _, c := range calls {
			if strings.Contains(c, "--prefetch-after") {
				prefetchers++
			} else if m := segmentFetch.FindStringSubmatch(c); m != nil {
				handed++
				if m[1] <= newest {
					t.Errorf("pipe fetched %s, which the archive holds (restored through %s): pipe-wal should have taken it from the spool", m[1], newest)
				}
			}
		}
		t.Logf("%d segments restored, through %s; pipe ran %d times: %d prefetchers, %d fetches of a segment past the end", len(restored), newest, len(calls), prefetchers, handed)
		if len(restored) < 100 || prefetchers == 0 || !strings.Contains(log, "archive recovery complete") {
			t.Errorf("%d segments restored, %d prefetchers started by pipe-wal; pipe ran:\n%s\nrecovery log:\n%s", len(restored), prefetchers, strings.Join(calls, "\n"), lastLines(log, 30))
		}
		noSecret(t, "the recovery's log", log, b.m.Pass)
		noSecret(t, "the prefetcher's log", syncPG.mustSh(t, "cat /tmp/r3/pg_wal/pipe-spool/fetch/prefetch.log"), b.m.Pass)
	})

	// No secret in any PostgreSQL log line, nor in the pusher's log.
	for _, c := range clusters {
		noSecret(t, c.name+"'s PostgreSQL log", c.logs(t), b.m.Pass)
		_, out := c.sh(t, "cat pg_wal/pipe-spool/push/pusher.log 2>/dev/null; true")
		noSecret(t, c.name+"'s pusher log", out, b.m.Pass)
	}
}

// noSecret fails the test if text holds secret.
func noSecret(t *testing.T, what, text, secret string) {
	t.Helper()
	if strings.Contains(text, secret) {
		t.Errorf("%s holds a secret:\n%s", what, lastLines(text, 20))
	}
}

// nextSegment is the name of the segment after name (1 MiB segments).
func nextSegment(name string) string {
	var tli, log, seg uint64
	fmt.Sscanf(name, "%08X%08X%08X", &tli, &log, &seg)
	seg++
	if seg == 0x1000 {
		log, seg = log+1, 0
	}
	return fmt.Sprintf("%08X%08X%08X", tli, log, seg)
}

// exitStatus is a command's exit status (-1 if it did not exit).
func exitStatus(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// recoveryScript is the start of a shell script that makes dir a copy of
// the base backup in /tmp/base, set to recover on port with
// restoreCommand; the caller starts it.
func recoveryScript(dir string, port int, restoreCommand string) string {
	return fmt.Sprintf(`set -e
rm -rf %[1]s && cp -a /tmp/base %[1]s && touch %[1]s/recovery.signal
cat >> %[1]s/postgresql.auto.conf <<'EOF'
port = %[2]d
archive_mode = off
restore_command = '%[3]s'
EOF
`, dir, port, restoreCommand)
}

// recoverToEnd recovers a copy of the base backup in /tmp/base into dir,
// on port, with restoreCommand, to the end of the archive; it checks that
// the server has the last transaction and returns its log. The server is
// stopped when the test ends.
func (w *walCluster) recoverToEnd(t *testing.T, dir string, port int, restoreCommand string) string {
	t.Helper()
	w.mustSh(t, recoveryScript(dir, port, restoreCommand)+fmt.Sprintf("pg_ctl -D %[1]s -l %[1]s.log -w -t 300 start\n", dir))
	t.Cleanup(func() { w.sh(t, "pg_ctl -D "+dir+" stop -m fast") })
	// It accepts read-only connections while it replays: wait for the end
	// of the archive and the promotion.
	for deadline := time.Now().Add(5 * time.Minute); w.psql(t, port, "SELECT pg_is_in_recovery()") == "t"; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("recovery did not end in 5 minutes")
		}
	}
	if got := w.psql(t, port, "SELECT note FROM marker"); got != "the last transaction" {
		t.Errorf("the recovered server has marker %q", got)
	}
	return w.mustSh(t, "cat "+dir+".log")
}

// walSetup is what a test of a server that archives with pipe starts
// from: MinIO and a bucket of its own, an age key pair in keys, and the
// environment of a pipe inside the server's container.
func walSetup(t *testing.T, bucket string) (b *s3Bench, keys string, env map[string]string) {
	t.Helper()
	b = newS3Bench(t)
	b.bucket(t, bucket)
	keys = t.TempDir()
	mustPipe(t, keys, nil, "keygen", "-o", "wal")
	return b, keys, b.inside(bucket)
}

// TestWALSpoolFull archives with a background pusher whose spool is on a
// disk with no room left (a full tmpfs): no note of a file pushed ahead
// can be written, so each archive_command pushes its file itself, says
// why, and archiving keeps up, instead of waiting out its timeout for a
// note and blaming the pusher.
func TestWALSpoolFull(t *testing.T) {
	requireDocker(t)
	bucket := "spoolfull"
	b, keys, env := walSetup(t, bucket)
	env["PIPE_VAR_background"], env["PIPE_VAR_spool"] = "always", "/spool"
	pg := startWALCluster(t, "spoolfull", true, env, keys, testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		hc.ShmSize = 256 << 20
		hc.Tmpfs = map[string]string{"/spool": "size=64k,uid=999,gid=999,mode=0700"}
	}))
	pg.sh(t, "dd if=/dev/zero of=/spool/fill bs=4k 2>/dev/null; df /spool")
	pg.psql(t, 5432, "CREATE TABLE filler AS SELECT g, repeat('x', 200) AS pad FROM generate_series(1, 20000) g")
	start := time.Now()
	last := pg.archivedThrough(t)
	if d := time.Since(start); d > 50*time.Second {
		t.Errorf("archiving through %s with a full spool took %s: archive_command waited for notes that could not come", last, d)
	}
	if failed := pg.psql(t, 5432, "SELECT failed_count FROM pg_stat_archiver"); failed != "0" {
		t.Errorf("archive_command failed %s times with a full spool:\n%s", failed, lastLines(pg.logs(t), 30))
	}
	if logs := pg.logs(t); !strings.Contains(logs, "pushing the file itself, without the spool") || !strings.Contains(logs, "the disk of /spool is full") {
		t.Errorf("the log does not say why the pushes went around the spool:\n%s", lastLines(logs, 30))
	}
	if n := len(b.keys(t, bucket, "archive/")); n < 4 {
		t.Errorf("the archive holds %d objects", n)
	}
}
