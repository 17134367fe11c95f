package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcmariadb "github.com/testcontainers/testcontainers-go/modules/mariadb"
)

// The MariaDB physical scenario: pipe's mariadb_backup against pipe's own
// logical dump of the same data and against mariadb-backup | zstd | mc,
// the restore with its prepare against the logical restore, an
// incremental after 2% of the rows changed against a full, and how far
// the binlog archive trails the server under steady writes. Everything
// runs inside the MariaDB container, as a physical backup must (it reads
// the server's files).

type mariaPhysicalResult struct {
	cpus                         int
	rows                         int
	size                         int64 // the server's estimate of the table
	version                      string
	backup, restore, incremental *race
	stored                       map[string][]int64 // bytes each contender stored, per run
	lag                          []time.Duration    // per sample of the server's position
	writes                       int                // transactions a second during the lag test
}

// physicalContainer is the MariaDB container and how to run things in it.
type physicalContainer struct {
	id  string
	env []string
}

// script runs a bash script in the container, timed from the host.
func (p *physicalContainer) script(text string) runFunc {
	argv := []string{"docker", "exec"}
	for _, e := range p.env {
		argv = append(argv, "-e", e)
	}
	argv = append(argv, p.id, "bash", "-o", "pipefail", "-c", text)
	return commands(nil, argv)
}

func (p *physicalContainer) run(ctx context.Context, text string) (string, error) {
	m, err := p.script(text)(ctx, 1)
	return strings.TrimSpace(string(m.stdout)), err
}

func (b *bench) mariaPhysicalScenario(ctx context.Context) (*mariaPhysicalResult, error) {
	res := &mariaPhysicalResult{cpus: runtime.NumCPU(), rows: 6_000_000, stored: map[string][]int64{}}
	if b.cfg.quick {
		res.rows = 500_000
	}
	logf("scenario: MariaDB physical backups (%d rows) through MinIO: mariadb_backup against pipe's logical dump and mariadb-backup | zstd | mc", res.rows)
	zstd, err := exec.LookPath("zstd")
	if err != nil {
		return nil, fmt.Errorf("zstd is not installed (Debian: zstd): %w", err)
	}
	m, err := b.startMinIO(ctx, b.cfg.mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	minioIP, err := m.c.ContainerIP(ctx)
	if err != nil {
		return nil, err
	}
	dockerHost()
	c, err := tcmariadb.Run(ctx, mariadbImage, tcmariadb.WithDatabase("bench"), tcmariadb.WithUsername("root"), tcmariadb.WithPassword(mariadbPassword),
		testcontainers.WithCmdArgs("--log-bin=mysql-bin", "--server-id=1", "--innodb-buffer-pool-size=512M", "--binlog-format=ROW"),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{HostFilePath: b.cfg.pipe, ContainerFilePath: "/usr/local/bin/pipe", FileMode: 0o755},
			testcontainers.ContainerFile{HostFilePath: b.cfg.mc, ContainerFilePath: "/usr/local/bin/mc", FileMode: 0o755},
			testcontainers.ContainerFile{HostFilePath: zstd, ContainerFilePath: "/usr/local/bin/zstd", FileMode: 0o755},
			testcontainers.ContainerFile{Reader: strings.NewReader(physicalBenchFile(minioIP)), ContainerFilePath: "/bench/phys.hcl", FileMode: 0o644},
		))
	if c != nil {
		defer testcontainers.TerminateContainer(c)
	}
	if err != nil {
		return nil, fmt.Errorf("starting MariaDB (docker and ../shared/testimages/build.sh): %w", err)
	}
	in := &physicalContainer{id: c.GetContainerID(), env: []string{"PIPE_VAR_secret=" + minioSecret, "PIPE_VAR_dbpass=" + mariadbPassword,
		"MC_HOST_" + mcAlias + "=http://" + minioUser + ":" + minioSecret + "@" + minioIP + ":9000", "MC_CONFIG_DIR=/tmp/mc"}}
	sql := func(q string) (string, error) {
		return in.run(ctx, "mariadb -uroot -p\"$PIPE_VAR_dbpass\" --batch --skip-column-names sbtest <<'EOF'\n"+q+"\nEOF")
	}
	if _, err := in.run(ctx, "mariadb -uroot -p\"$PIPE_VAR_dbpass\" -e 'CREATE DATABASE sbtest' && mkdir -p /restore"); err != nil {
		return nil, err
	}
	start := time.Now()
	if _, err := sql(fmt.Sprintf("CREATE TABLE sbtest1 (id INT PRIMARY KEY, k INT NOT NULL, c CHAR(120) NOT NULL, pad CHAR(60) NOT NULL, KEY k_1 (k)) ENGINE=InnoDB;\n"+
		"INSERT INTO sbtest1 SELECT seq, seq * 7919 %% %d, CONCAT(SHA2(seq, 256), LEFT(SHA2(seq + 1, 256), 56)), LEFT(SHA2(-seq, 256), 60) FROM seq_1_to_%d;", res.rows, res.rows)); err != nil {
		return nil, fmt.Errorf("loading sbtest1: %w", err)
	}
	if res.version, err = sql("SELECT VERSION()"); err != nil {
		return nil, err
	}
	out, err := in.run(ctx, "stat -c %s /var/lib/mysql/sbtest/sbtest1.ibd")
	if err != nil {
		return nil, err
	}
	if res.size, err = strconv.ParseInt(out, 10, 64); err != nil {
		return nil, fmt.Errorf("the table's size: %q: %w", out, err)
	}
	logf("  loaded %d rows, %s (sbtest1.ibd), in %s", res.rows, mib(res.size), time.Since(start).Round(time.Second))

	pipe := func(pipeline string, label string) runFunc {
		run := in.script("pipe run /bench/phys.hcl --pipeline " + pipeline + " --json")
		return func(ctx context.Context, rep int) (measurement, error) {
			m, err := run(ctx, rep)
			var s runSummary
			if err == nil && json.Unmarshal(m.stdout, &s) == nil && len(s.Pipelines) == 1 && rep > 0 {
				res.stored[label] = append(res.stored[label], s.Pipelines[0].BytesWritten)
			}
			return m, err
		}
	}
	empty := func(prefix string) func() { return m.emptier(ctx, b.cfg.mc, prefix) }
	res.backup = &race{name: "MariaDB: physical backup", data: mib(res.size) + " InnoDB", bytes: res.size,
		pipe: &contender{label: "pipe mariadb_backup", clean: empty("phys/full/"), run: pipe("full", "full")},
		refs: []*contender{
			{label: "pipe mysql (logical)", target: 0.6, clean: empty("phys/logical/"), run: pipe("logical", "logical")},
			{label: "mariadb-backup → zstd → mc", target: 0.9, clean: empty("phys/ref/"), run: in.script(
				"mariadb-backup --user=root --password=\"$PIPE_VAR_dbpass\" --backup --stream=xbstream --parallel=4 --target-dir=/tmp/ref 2>/dev/null | zstd -q -3 -T2 | mc pipe " + mcAlias + "/" + s3Bucket + "/phys/ref/full.xbstream.zst")},
		}}
	if err := res.backup.run(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	refRestore := "rm -rf /restore/r && mkdir /restore/r && mc cat " + mcAlias + "/" + s3Bucket + "/phys/ref/full.xbstream.zst | zstd -q -d | mbstream -x -C /restore/r -p 4 && mariadb-backup --prepare --target-dir=/restore/r --use-memory=256M 2>/dev/null"
	res.restore = &race{name: "MariaDB: restore", data: mib(res.size) + " InnoDB", bytes: res.size,
		pipe: &contender{label: "pipe mariadb_backup (prepared)", run: in.script("rm -rf /restore/p && pipe run /bench/phys.hcl --pipeline restore")},
		refs: []*contender{
			{label: "pipe mysql (logical)", target: 0.35, run: in.script("mariadb -uroot -p\"$PIPE_VAR_dbpass\" -e 'DROP DATABASE IF EXISTS sbrestore' && pipe run /bench/phys.hcl --pipeline logical_restore")},
			{label: "mc → zstd → mbstream, prepare", run: in.script(refRestore)},
			{label: "mc → zstd → mbstream, prepare, sync", run: in.script(refRestore + " && find /restore/r -type f -print0 | xargs -0 sync --")},
		}}
	if err := res.restore.run(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	// The logical restore's copy goes: the incremental race backs up the
	// table alone.
	if _, err := sql("DROP DATABASE IF EXISTS sbrestore"); err != nil {
		return nil, err
	}
	// The incremental: 2% of the rows changed before each run (untimed),
	// one key range each time (as the PostgreSQL incremental scenario
	// does: 2% of the rows spread over the table would touch most of its
	// pages), each run on the one before it.
	var changed int
	change := func() {
		changed++
		span := res.rows / 50
		from := (changed * span) % (res.rows - span)
		if _, err := sql(fmt.Sprintf("UPDATE sbtest1 SET c = CONCAT(SHA2(id + %d, 256), LEFT(SHA2(id, 256), 56)) WHERE id > %d AND id <= %d", changed*1000003, from, from+span)); err != nil {
			logf("  changing 2%% of the rows: %v", err)
		}
	}
	res.incremental = &race{name: "MariaDB: incremental after 2% changed", data: mib(res.size) + " InnoDB", bytes: res.size,
		pipe: &contender{label: "pipe mariadb_backup incremental", clean: change, run: pipe("incremental", "incremental")},
		refs: []*contender{{label: "pipe mariadb_backup full", target: 0.3, clean: empty("phys/full/"), run: pipe("full", "full again")}}}
	if err := res.incremental.run(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	res.writes = 400
	if res.lag, err = b.binlogLag(ctx, in, c, res.writes); err != nil {
		return nil, err
	}
	return res, nil
}

// physicalBenchFile is the scenario's pipeline file, in the container:
// MinIO at ip.
func physicalBenchFile(ip string) string {
	s3 := fmt.Sprintf(`    bucket            = %q
    endpoint          = "http://%s:9000"
    region            = "us-east-1"
    path_style        = true
    access_key_id     = %q
    secret_access_key = var.secret
`, s3Bucket, ip, minioUser)
	conn := `    socket   = "/run/mysqld/mysqld.sock"
    user     = "root"
    password = var.dbpass
`
	zstd := "  compress {\n    codec   = \"zstd\"\n    level   = 3\n    workers = 2\n  }\n"
	return `variable "secret" { sensitive = true }
variable "dbpass" { sensitive = true }

archive "binlog" {
  store "s3" {
` + s3 + `    key = "binlog/"
  }
  compress {}
  binlog {
    path    = "/var/lib/mysql/mysql-bin"
    max_lag = "1s"
  }
}

pipeline "full" {
  source "mariadb_backup" {
` + conn + `  }
` + zstd + `  sink "s3" {
` + s3 + `    key = "phys/full/${run.id}/"
  }
}

pipeline "incremental" {
  source "mariadb_backup" {
` + conn + `    incremental = true
    full_every  = 1000
  }
` + zstd + `  sink "s3" {
` + s3 + `    key = "phys/inc/${run.id}/"
  }
}

pipeline "logical" {
  source "mysql" {
` + conn + `    database = "sbtest"
  }
` + zstd + `  sink "s3" {
` + s3 + `    key = "phys/logical/${run.id}/"
  }
}

pipeline "restore" {
  source "s3" {
` + s3 + `    prefix = "phys/full/"
  }
  decompress {}
  sink "mariadb_backup" {
    data_directory = "/restore/p"
  }
}

pipeline "logical_restore" {
  source "s3" {
` + s3 + `    prefix = "phys/logical/"
  }
  decompress {}
  sink "mysql" {
` + conn + `    database        = "sbrestore"
    create_database = true
  }
}
`
}

// binlogLag runs pipe binlog archive in the container while a client
// commits writes single-row updates a second for 30 seconds (10 with
// -quick). Every 200 ms it notes the server's binlog position; every
// 500 ms it asks the archive how far each file is stored. A position's
// lag is from when the server had written it to the first look that found
// it stored.
func (b *bench) binlogLag(ctx context.Context, in *physicalContainer, c testcontainers.Container, writes int) ([]time.Duration, error) {
	secs := 30
	if b.cfg.quick {
		secs = 10
	}
	logf("  binlog lag: %d single-row updates a second for %d s, pipe binlog archive (max_lag 1s) running", writes, secs)
	if _, err := in.run(ctx, "pipe binlog archive /bench/phys.hcl --once && (nohup pipe binlog archive /bench/phys.hcl > /tmp/archiver.log 2>&1 &)"); err != nil {
		return nil, fmt.Errorf("starting the archiver: %w", err)
	}
	defer func() { _, _ = in.run(context.WithoutCancel(ctx), "pkill -f 'binlog archive'") }()
	args := []string{"exec", "-i", in.id, "mariadb", "-uroot", "-p" + mariadbPassword, "sbtest"}
	w := exec.CommandContext(ctx, "docker", args...)
	stdin, err := w.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, err
	}
	type sample struct {
		at   time.Time
		file string
		pos  int64
	}
	var mu sync.Mutex
	var samples []sample
	stored := map[string]int64{}
	var lags []time.Duration
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { // the writes
		defer wg.Done()
		bw := bufio.NewWriter(stdin)
		tick := time.NewTicker(time.Second / time.Duration(writes))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				bw.Flush()
				stdin.Close()
				return
			case <-tick.C:
			}
			fmt.Fprintf(bw, "UPDATE sbtest1 SET k = k + 1 WHERE id = %d;\n", 1+i*7919%1000000)
			bw.Flush()
		}
	}()
	go func() { // the server's position
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(200 * time.Millisecond):
			}
			out, err := in.run(ctx, "mariadb -uroot -p\"$PIPE_VAR_dbpass\" --batch --skip-column-names -e 'SHOW MASTER STATUS'")
			if f := strings.Fields(out); err == nil && len(f) >= 2 {
				pos, _ := strconv.ParseInt(f[1], 10, 64)
				mu.Lock()
				samples = append(samples, sample{time.Now(), f[0], pos})
				mu.Unlock()
			}
		}
	}()
	look := func() {
		out, err := in.run(ctx, "pipe binlog list /bench/phys.hcl --json")
		var l struct {
			Servers map[string][]struct {
				Name string
				End  int64
			} `json:"servers"`
		}
		if err != nil || json.Unmarshal([]byte(out), &l) != nil {
			return
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, files := range l.Servers {
			for _, f := range files {
				stored[f.Name] = f.End
			}
		}
		kept := samples[:0]
		for _, s := range samples {
			if stored[s.file] >= s.pos {
				lags = append(lags, now.Sub(s.at))
			} else {
				kept = append(kept, s)
			}
		}
		samples = kept
	}
	go func() { // the archive
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
			look()
		}
	}()
	time.Sleep(time.Duration(secs) * time.Second)
	close(done)
	wg.Wait()
	if err := w.Wait(); err != nil {
		return nil, fmt.Errorf("the writes: %w", err)
	}
	for i := 0; i < 20; i++ { // the last positions
		mu.Lock()
		left := len(samples)
		mu.Unlock()
		if left == 0 {
			break
		}
		time.Sleep(500 * time.Millisecond)
		look()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(samples) > 0 {
		log, _ := in.run(ctx, "tail -5 /tmp/archiver.log")
		return nil, fmt.Errorf("%d positions of the server were never stored in the archive: %s", len(samples), log)
	}
	slices.Sort(lags)
	logf("  binlog lag over %d positions: median %s, max %s", len(lags), median(lags).Round(10*time.Millisecond), lags[len(lags)-1].Round(10*time.Millisecond))
	return lags, nil
}

func (r *mariaPhysicalResult) races() []*race { return []*race{r.backup, r.restore, r.incremental} }

func (r *mariaPhysicalResult) markdown(w writer) {
	w("\n## MariaDB: physical backups, incrementals and the binlog archive\n\n")
	w("MariaDB %s (container) and MinIO on the same %d-CPU machine; one sysbench-like InnoDB table (`sbtest1`: id, k, c CHAR(120), pad CHAR(60), a secondary index on k) of %d rows, %s (its .ibd file). Every contender runs inside the MariaDB container (a physical backup reads the server's files) and stores to MinIO; zstd level 3 on 2 threads for all. pipe: `mariadb_backup` (mariadb-backup --parallel 4) and, for the logical rows, its own `mysql` source and sink (mariadb-dump; the mariadb client). The reference: `mariadb-backup --backup --stream=xbstream --parallel=4 | zstd -3 -T2 | mc pipe`, and back `mc cat | zstd -d | mbstream -x -p 4` then `mariadb-backup --prepare`. pipe's restore includes the prepare. The incremental race changes 2%% of the rows, one key range, before each incremental (untimed); each builds on the one before. pipe's restore syncs every file it wrote (as its fs sink does); the reference is shown without and with a `sync` of its files. Medians of interleaved runs; a time ratio below 1 means pipe is faster. (The CPU times under Every run are the `docker exec` client's, not the tools'.)\n\n",
		r.version, r.cpus, r.rows, mib(r.size))
	w.table("race", "pipe", "against", "its time", "pipe / it", "target", "met?")
	for _, rc := range r.races() {
		p := rc.pipe.median()
		for _, ref := range rc.refs {
			ratio := timeRatio(p, ref.median())
			target, met := "(context)", ""
			if ref.target > 0 {
				target, met = fmt.Sprintf("≤ %.2f×", ref.target), yesNo(ratio <= ref.target)
			}
			w("| %s | %s | %s | %s | %.2f× | %s | %s |\n", rc.name, p.Round(10*time.Millisecond), ref.label, ref.median().Round(10*time.Millisecond), ratio, target, met)
		}
	}
	inc, full := medianBytes(r.stored["incremental"]), medianBytes(r.stored["full again"])
	if full > 0 {
		ratio := float64(inc) / float64(full)
		w("\nStored: an incremental after 2%% changed %s, a full %s: %.3f× (target ≤ 0.10×: %s). A full: %s; the logical dump: %s.\n",
			mib(inc), mib(full), ratio, yesNo(ratio <= 0.1), mib(medianBytes(r.stored["full"])), mib(medianBytes(r.stored["logical"])))
	}
	if len(r.lag) > 0 {
		max := r.lag[len(r.lag)-1]
		w("\nThe binlog archive under %d single-row updates a second (pipe binlog archive, max_lag 1s; the server's position every 200 ms, the archive's every 500 ms): median lag %s, max %s over %d positions (target ≤ 5 s: %s).\n",
			r.writes, median(r.lag).Round(10*time.Millisecond), max.Round(10*time.Millisecond), len(r.lag), yesNo(max <= 5*time.Second))
	}
}

// medianBytes is the median of sizes (0 for none).
func medianBytes(sizes []int64) int64 {
	if len(sizes) == 0 {
		return 0
	}
	s := slices.Clone(sizes)
	slices.Sort(s)
	return s[len(s)/2]
}
