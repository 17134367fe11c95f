package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcminio "github.com/testcontainers/testcontainers-go/modules/minio"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The incremental base backup scenario (issue: incremental base backups):
// PostgreSQL 17 in its container (with pg_basebackup, pg_combinebackup
// and pgBackRest of its Debian suite) and MinIO with TLS, both on the
// host's network. pgbench -i -s 100, then a full backup by each tool, then
// rounds of 2% of pgbench_accounts updated in one key range and a
// CHECKPOINT, after each of which each tool takes an incremental on its
// previous backup: pipe (postgres_basebackup, incremental = true),
// `pg_basebackup --incremental | zstd -T2 | mc pipe` and pgBackRest's
// block incremental (repo-bundle, repo-block, --type=incr, process-max
// 2). Then the restore of the newest chain (full + every incremental)
// against pipe's restore of the full alone and against fetching and
// extracting pg_basebackup's runs and pg_combinebackup. Every tool runs
// inside the container (docker exec, the same cost for each); zstd level 3
// everywhere, no encryption.

const (
	incrImage = "postgres:17"
	incrPort  = 55490
	incrUser  = "bench"
	incrRange = 200000 // rows of pgbench_accounts a round updates: 2% at scale 100
)

// incrTools are the contenders' labels.
var incrTools = []string{"pipe", "pg_basebackup --incremental, zstd -T2, mc pipe", "pgBackRest block incremental"}

// incrResult is the scenario's outcome.
type incrResult struct {
	scale        int
	clusterSize  int64
	versions     []string
	full, incr   *race
	restore      *race
	stored       map[string][]int64 // tool → bytes of each backup, in order (the full first)
	pipePeak     map[string]int64   // phase → pipe's peak RSS, every pipe process summed
	pipeBudget   map[string]int64   // phase → the budget pipe plan prints
	restoreDisk  map[string]int64   // tool → bytes on disk at the end of the restore, staging included
	combineAlone []time.Duration    // pg_combinebackup's own wall, of each restore run
	notes        []string
	pipeRuns     map[string][]pipelineRun
}

// incrBench is the scenario's containers and files.
type incrBench struct {
	b       *bench
	pg      testcontainers.Container
	minio   *tlsMinIO
	res     *incrResult
	changes int // rounds of changes made so far
	rssPeak int64
	rssStop chan struct{}
	rssDone chan struct{}
	s3      string // pipe's s3 attributes
	// envFile holds the tools' environment (the secrets among it stay
	// out of command lines and errors).
	envFile string
}

func (b *bench) incrementalScenario(ctx context.Context) (*incrResult, error) {
	scale, rounds := 100, 6
	if b.cfg.quick {
		scale, rounds = 5, 3
	}
	logf("scenario: incremental base backups of PostgreSQL 17, pgbench scale %d, %d rounds of 2%% of pgbench_accounts changed: pipe vs pg_basebackup --incremental and pgBackRest block incremental", scale, rounds)
	dir, err := os.MkdirTemp("", "pipe-bench-incr-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	m, err := startTLSMinIO(ctx, dir, b.cfg.mc, []string{"pipe", "pgbb", "pgbackrest"})
	if err != nil {
		return nil, err
	}
	defer m.stop()
	ib := &incrBench{b: b, minio: m, res: &incrResult{scale: scale, stored: map[string][]int64{}, pipePeak: map[string]int64{}, pipeBudget: map[string]int64{},
		restoreDisk: map[string]int64{}, pipeRuns: map[string][]pipelineRun{}}}
	ib.envFile = filepath.Join(dir, "env")
	env := []string{"PGPASSWORD=" + pgPassword, "SSL_CERT_FILE=/certs/public.crt", "PIPE_VAR_secret=" + minioSecret,
		"MC_HOST_" + mcAlias + "=https://" + minioUser + ":" + minioSecret + "@localhost:" + m.port, "MC_CONFIG_DIR=/tmp/mc", "HOME=/tmp"}
	if err := os.WriteFile(ib.envFile, []byte(strings.Join(env, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := ib.startPG(ctx, dir); err != nil {
		return nil, err
	}
	defer testcontainers.TerminateContainer(ib.pg)
	if err := ib.setUp(ctx, scale); err != nil {
		return nil, err
	}
	res := ib.res
	full := &race{name: fmt.Sprintf("full base backup of PostgreSQL 17 (%s) to MinIO", mib(res.clusterSize)), bytes: res.clusterSize, noWarmup: true}
	incr := &race{name: "incremental base backup after 2% of pgbench_accounts changed", bytes: res.clusterSize, noWarmup: true}
	for i, label := range incrTools {
		for _, r := range []*race{full, incr} {
			c := &contender{label: label, run: ib.backupRun(i, r == full)}
			if r == incr && i == 0 {
				c.clean = func() { ib.change(ctx) } // pipe runs first in each round
			}
			if i == 0 {
				r.pipe = c
			} else {
				r.refs = append(r.refs, c)
			}
		}
	}
	if err := full.run(ctx, 1); err != nil {
		return nil, ib.withLog(ctx, err)
	}
	res.full = full
	if err := incr.run(ctx, rounds); err != nil {
		return nil, ib.withLog(ctx, err)
	}
	res.incr = incr

	restore := &race{name: fmt.Sprintf("restore of the newest chain (full + %d incrementals) into a new data directory", rounds), bytes: res.clusterSize, noWarmup: true}
	restore.pipe = &contender{label: fmt.Sprintf("pipe, full + %d (composed)", rounds), clean: ib.clearRestores(ctx), run: ib.restoreRun("chain")}
	restore.refs = []*contender{
		{label: "pipe, the full alone", clean: ib.clearRestores(ctx), run: ib.restoreRun("full")},
		{label: "mc cat, zstd -d, tar -x each run (2 at once), then pg_combinebackup --copy-file-range", clean: ib.clearRestores(ctx), run: ib.restoreRun("pgc")},
	}
	reps := max(1, min(b.cfg.reps, 3))
	if err := restore.run(ctx, reps); err != nil {
		return nil, ib.withLog(ctx, err)
	}
	res.restore = restore
	res.versions = ib.versions(ctx)
	return res, nil
}

// startPG starts PostgreSQL 17 on the host's network, archiving through
// pgBackRest (whose backups check the archive; pipe's and pg_basebackup's
// need only that the server archives), with the tools copied in.
func (ib *incrBench) startPG(ctx context.Context, dir string) error {
	if err := needTools(exec.LookPath, "Debian: zstd (copied into the container)", "zstd"); err != nil {
		return err
	}
	zstd, _ := exec.LookPath("zstd")
	conf := fmt.Sprintf(`[global]
repo1-type=s3
repo1-path=/repo
repo1-s3-bucket=pgbackrest
repo1-s3-endpoint=localhost
repo1-storage-port=%s
repo1-s3-region=us-east-1
repo1-s3-uri-style=path
repo1-storage-ca-file=/certs/public.crt
repo1-s3-key=%s
repo1-s3-key-secret=%s
repo1-bundle=y
repo1-block=y
repo1-retention-full=99
compress-type=zst
compress-level=3
process-max=2
start-fast=y
log-level-console=warn
log-level-file=off
lock-path=/tmp/pgbackrest-lock
spool-path=/tmp/pgbackrest-spool

[bench]
pg1-path=/var/lib/postgresql/data
pg1-port=%d
pg1-socket-path=/var/run/postgresql
pg1-user=%s
`, ib.minio.port, minioUser, minioSecret, incrPort, incrUser)
	confPath := filepath.Join(dir, "pgbackrest.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		return err
	}
	dockerHost()
	c, err := testcontainers.Run(ctx, incrImage,
		testcontainers.WithEnv(map[string]string{"POSTGRES_USER": incrUser, "POSTGRES_PASSWORD": pgPassword, "POSTGRES_DB": "bench", "PGPORT": strconv.Itoa(incrPort)}),
		testcontainers.WithCmdArgs("-c", fmt.Sprintf("port=%d", incrPort), "-c", "summarize_wal=on", "-c", "archive_mode=on",
			"-c", "archive_command=pgbackrest --stanza=bench archive-push %p", "-c", "max_wal_size=8GB", "-c", "checkpoint_timeout=1h",
			"-c", "listen_addresses=localhost"),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{HostFilePath: ib.b.cfg.pipe, ContainerFilePath: "/usr/local/bin/pipe", FileMode: 0o755},
			testcontainers.ContainerFile{HostFilePath: ib.b.cfg.mc, ContainerFilePath: "/usr/local/bin/mc", FileMode: 0o755},
			testcontainers.ContainerFile{HostFilePath: zstd, ContainerFilePath: "/usr/local/bin/zstd", FileMode: 0o755},
			testcontainers.ContainerFile{HostFilePath: ib.minio.cert, ContainerFilePath: "/certs/public.crt", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: confPath, ContainerFilePath: "/etc/pgbackrest/pgbackrest.conf", FileMode: 0o644},
		),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			hc.NetworkMode = "host"
			hc.ShmSize = 1 << 30
		}),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").WithOccurrence(2).WithStartupTimeout(3*time.Minute)))
	ib.pg = c
	if err != nil {
		return fmt.Errorf("starting %s (../shared/testimages/build.sh postgres-17): %w", incrImage, err)
	}
	return nil
}

// sh runs script with bash inside the container as postgres, timed from
// here (docker exec costs every tool the same).
func (ib *incrBench) sh(ctx context.Context, script string) (measurement, error) {
	argv := []string{"docker", "exec", "-u", "postgres", "--env-file", ib.envFile, ib.pg.GetContainerID(), "bash", "-o", "pipefail", "-ec", script}
	m, err := timeCommand(ctx, argv)
	if err != nil {
		return m, fmt.Errorf("%s: %w\n%s", firstLine(script), err, m.stdout)
	}
	return m, nil
}

// psql runs sql in the bench database.
func (ib *incrBench) psql(ctx context.Context, sql string) (string, error) {
	m, err := ib.sh(ctx, fmt.Sprintf("psql -X -A -t -h /var/run/postgresql -p %d -U %s -d bench -c %s", incrPort, incrUser, shq(sql)))
	return strings.TrimSpace(string(m.stdout)), err
}

// setUp loads the data set, creates pgBackRest's stanza and writes pipe's
// files.
func (ib *incrBench) setUp(ctx context.Context, scale int) error {
	start := time.Now()
	if _, err := ib.sh(ctx, fmt.Sprintf("pgbench -h /var/run/postgresql -p %d -U %s -i -q -s %d bench", incrPort, incrUser, scale)); err != nil {
		return err
	}
	size, err := ib.psql(ctx, "SELECT sum(pg_database_size(oid)) FROM pg_database")
	if err != nil {
		return err
	}
	ib.res.clusterSize, _ = strconv.ParseInt(size, 10, 64)
	logf("  pgbench scale %d: the cluster holds %s, loaded in %s", scale, mib(ib.res.clusterSize), time.Since(start).Round(time.Second))
	if _, err := ib.sh(ctx, "pgbackrest --stanza=bench stanza-create && mkdir -p /tmp/pgbb"); err != nil {
		return err
	}
	if _, err := ib.psql(ctx, "CHECKPOINT"); err != nil {
		return err
	}
	return ib.writeFiles(ctx)
}

// writeFiles writes pipe's backup pipeline and the restore of the
// newest chain into the container.
func (ib *incrBench) writeFiles(ctx context.Context) error {
	ib.s3 = fmt.Sprintf(`    bucket            = "pipe"
    endpoint          = "https://localhost:%s"
    region            = "us-east-1"
    path_style        = true
    access_key_id     = %q
    secret_access_key = var.secret
`, ib.minio.port, minioUser)
	backup := fmt.Sprintf(`variable "secret" { sensitive = true }
pipeline "base" {
  source "postgres_basebackup" {
    host        = "/var/run/postgresql"
    port        = %d
    user        = %q
    incremental = true
    full_every  = 100
  }
  compress {
    codec = "zstd"
    level = 3
  }
  sink "s3" {
%s    key               = "base/${run.id}/${stream.name}${stream.ext}"
  }
}
`, incrPort, incrUser, ib.s3)
	if err := ib.put(ctx, "/tmp/pipe-base.hcl", backup); err != nil {
		return err
	}
	return ib.put(ctx, "/tmp/pipe-restore-chain.hcl", ib.restoreText("chain", ""))
}

// restoreText is pipe's restore into /tmp/restore-<name> of the newest
// run, or of the run runLine names.
func (ib *incrBench) restoreText(name, runLine string) string {
	return fmt.Sprintf(`variable "secret" { sensitive = true }
pipeline "restore" {
  source "s3" {
%s    prefix            = "base/"
%s  }
  decompress {}
  sink "postgres_basebackup" {
    data_directory  = "/tmp/restore-%s"
    restore_command = "pipe wal fetch /etc/pipe/none.hcl %%f %%p"
  }
}
`, ib.s3, runLine, name)
}

// put writes a file into the container.
func (ib *incrBench) put(ctx context.Context, path, text string) error {
	_, err := ib.sh(ctx, fmt.Sprintf("cat > %s <<'PIPE_EOF'\n%sPIPE_EOF", path, text))
	return err
}

// change updates the next 2% of pgbench_accounts, in one key range, and
// checkpoints: what each tool's next incremental holds.
func (ib *incrBench) change(ctx context.Context) {
	k := ib.changes
	sql := fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid BETWEEN %d AND %d", k*incrRange+1, (k+1)*incrRange)
	if ib.res.scale < 100 {
		sql = fmt.Sprintf("UPDATE pgbench_accounts SET abalance = abalance + 1 WHERE aid %% 50 = 0 AND aid BETWEEN %d AND %d", 1, ib.res.scale*100000)
	}
	ib.changes++
	if _, err := ib.psql(ctx, sql); err != nil {
		logf("  warning: %v", err)
	}
	if _, err := ib.psql(ctx, "CHECKPOINT"); err != nil {
		logf("  warning: %v", err)
	}
}

// backupRun is tool i's full or incremental backup; it records what the
// backup stored.
func (ib *incrBench) backupRun(i int, full bool) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		label := incrTools[i]
		before := ib.stored(ctx, i)
		var m measurement
		var err error
		switch i {
		case 0:
			ib.startRSS()
			m, err = ib.sh(ctx, "pipe run /tmp/pipe-base.hcl --json --progress never")
			phase := map[bool]string{true: "full", false: "incremental"}[full]
			ib.pipePeak(phase)
			if err == nil {
				var s runSummary
				if jerr := json.Unmarshal(m.stdout, &s); jerr == nil && len(s.Pipelines) == 1 {
					ib.res.pipeRuns[phase] = append(ib.res.pipeRuns[phase], s.Pipelines[0])
					ib.res.pipeBudget[phase] = s.Pipelines[0].Memory.Budget
				}
			}
		case 1:
			n := len(ib.res.stored[label])
			inc := ""
			if !full {
				inc = "--incremental=/tmp/pgbb/manifest "
			}
			m, err = ib.sh(ctx, fmt.Sprintf(`rm -f /tmp/pgbb/fifo && mkfifo /tmp/pgbb/fifo
tar -xOf /tmp/pgbb/fifo backup_manifest > /tmp/pgbb/manifest.next &
pg_basebackup -h /var/run/postgresql -p %d -U %s -c fast -X none -Ft -D - %s| tee -p /tmp/pgbb/fifo | zstd -T2 -3 -q | mc pipe --quiet %s/pgbb/%d.tar.zst
wait
mv /tmp/pgbb/manifest.next /tmp/pgbb/manifest`, incrPort, incrUser, inc, mcAlias, n))
		case 2:
			typ := "incr"
			if full {
				typ = "full"
			}
			m, err = ib.sh(ctx, "pgbackrest --stanza=bench --type="+typ+" backup")
		}
		if err != nil {
			return m, err
		}
		ib.res.stored[label] = append(ib.res.stored[label], ib.stored(ctx, i)-before)
		if full && i == 0 {
			id, err := ib.sh(ctx, "mc ls "+mcAlias+"/pipe/base/ | awk '{print $NF}' | grep '/$' | tr -d / | sort | tail -1")
			if err != nil {
				return m, err
			}
			fullRun := strings.TrimSpace(string(id.stdout))
			if err := ib.put(ctx, "/tmp/pipe-restore-full.hcl", ib.restoreText("full", fmt.Sprintf("    run               = %q\n", fullRun))); err != nil {
				return m, err
			}
		}
		return m, nil
	}
}

// stored is what tool i's store holds, in bytes.
func (ib *incrBench) stored(ctx context.Context, i int) int64 {
	bucket := []string{"pipe", "pgbb", "pgbackrest"}[i]
	m, err := ib.sh(ctx, "mc du --json "+mcAlias+"/"+bucket)
	if err != nil {
		return 0
	}
	var du struct {
		Size int64 `json:"size"`
	}
	_ = json.Unmarshal([]byte(strings.TrimSpace(string(m.stdout))), &du)
	return du.Size
}

// clearRestores removes every restore's output.
func (ib *incrBench) clearRestores(ctx context.Context) func() {
	return func() {
		if _, err := ib.sh(ctx, "rm -rf /tmp/restore-* /tmp/pgc"); err != nil {
			logf("  warning: %v", err)
		}
	}
}

// restoreRun restores: pipe's chain, pipe's full alone, or pg_basebackup's
// runs fetched, extracted and combined.
func (ib *incrBench) restoreRun(what string) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		var m measurement
		var err error
		switch what {
		case "chain", "full":
			ib.startRSS()
			m, err = ib.sh(ctx, fmt.Sprintf("pipe run /tmp/pipe-restore-%s.hcl --json --progress never && sync", what))
			ib.pipePeak("restore " + what)
			if err == nil {
				var s runSummary
				if jerr := json.Unmarshal(m.stdout[:max(0, strings.LastIndex(string(m.stdout), "}")+1)], &s); jerr == nil && len(s.Pipelines) == 1 {
					ib.res.pipeBudget["restore "+what] = s.Pipelines[0].Memory.Budget
				}
			}
		case "pgc":
			n := len(ib.res.stored[incrTools[1]])
			var dirs []string
			for i := range n {
				dirs = append(dirs, fmt.Sprintf("/tmp/pgc/%d", i))
			}
			// As an operator tunes it: two runs fetched at once (two
			// CPUs), and copy_file_range, which copies without passing
			// the blocks through pg_combinebackup.
			m, err = ib.sh(ctx, fmt.Sprintf(`seq 0 %d | xargs -P 2 -I{} bash -o pipefail -ec 'mkdir -p /tmp/pgc/{} && mc cat %s/pgbb/{}.tar.zst | zstd -d -q | tar -x -C /tmp/pgc/{}'
s=$EPOCHREALTIME
pg_combinebackup --copy-file-range -o /tmp/restore-pgc %s
sync
e=$EPOCHREALTIME
echo "combine $s $e"`, n-1, mcAlias, strings.Join(dirs, " ")))
			if err == nil {
				var s, e float64
				if _, serr := fmt.Sscanf(lastLine(string(m.stdout)), "combine %f %f", &s, &e); serr == nil {
					ib.res.combineAlone = append(ib.res.combineAlone, time.Duration((e-s)*float64(time.Second)))
				}
			}
		}
		if err != nil {
			return m, err
		}
		// What the restore left on disk, staging included; and, of
		// pg_combinebackup's, its output alone: the cluster at the newest
		// backup, which pipe's composed restore must not exceed by more
		// than what a restore needs beside it.
		du, derr := ib.sh(ctx, "(du -sb /tmp/restore-* /tmp/pgc 2>/dev/null || true) | awk '{s += $1} END {print s}'; (du -sb /tmp/restore-pgc 2>/dev/null || echo 0) | awk '{print $1}'")
		if derr == nil {
			f := strings.Fields(string(du.stdout))
			if len(f) == 2 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				out, _ := strconv.ParseInt(f[1], 10, 64)
				ib.res.restoreDisk[what] = max(ib.res.restoreDisk[what], n)
				if what == "pgc" {
					ib.res.restoreDisk["pgc-out"] = out
				}
			}
		}
		return m, nil
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// startRSS starts sampling, from the host's /proc, every pipe process's
// RSS (the container's processes are the host's too), summed.
func (ib *incrBench) startRSS() {
	ib.rssPeak = 0
	ib.rssStop, ib.rssDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ib.rssDone)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			if sum := pipeRSS(); sum > ib.rssPeak {
				ib.rssPeak = sum
			}
			select {
			case <-ib.rssStop:
				return
			case <-t.C:
			}
		}
	}()
}

// pipePeak ends the sampling and keeps the phase's peak.
func (ib *incrBench) pipePeak(phase string) {
	close(ib.rssStop)
	<-ib.rssDone
	ib.res.pipePeak[phase] = max(ib.res.pipePeak[phase], ib.rssPeak)
}

// pipeRSS sums the RSS of every process whose program is pipe.
func pipeRSS() int64 {
	entries, _ := os.ReadDir("/proc")
	var sum int64
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || filepath.Base(exe) != "pipe" {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
				sum += kb << 10
			}
		}
	}
	return sum
}

// versions names the tools.
func (ib *incrBench) versions(ctx context.Context) []string {
	m, err := ib.sh(ctx, "postgres --version; pg_basebackup --version; pgbackrest version; zstd --version; mc --version | head -1")
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(m.stdout)), "\n")
}

// withLog adds the server's last lines to err.
func (ib *incrBench) withLog(ctx context.Context, err error) error {
	if m, lerr := ib.sh(ctx, "tail -5 /var/lib/postgresql/data/log/* 2>/dev/null || true"); lerr == nil && len(m.stdout) > 0 {
		return fmt.Errorf("%w\nthe server's log:\n%s", err, m.stdout)
	}
	return err
}

func (r *incrResult) races() []*race { return []*race{r.full, r.incr, r.restore} }

func (r *incrResult) markdown(w writer) {
	w("\n## Incremental base backups (PostgreSQL 17, MinIO with TLS)\n\n")
	w("Tools: %s. pgbench scale %d (the cluster %s); %d rounds, each 2%% of pgbench_accounts updated in one key range and a CHECKPOINT, then each tool's incremental on its own previous backup. Every tool runs in the server's container and writes to MinIO over TLS; zstd level 3 everywhere; pgBackRest with repo-bundle, repo-block, process-max 2. Medians.\n\n",
		strings.Join(r.versions, "; "), r.scale, mib(r.clusterSize), len(r.incr.pipe.times))
	w.table("what", "pipe", "reference", "pipe / reference", "target", "met?")
	p, pf := r.incr.pipe.median(), r.full.pipe.median()
	ratio := timeRatio(p, pf)
	w("| incremental vs pipe's full, time | %.2f s | %.2f s | %.2f× | ≤ 0.25× | %s |\n", p.Seconds(), pf.Seconds(), ratio, yesNo(ratio <= 0.25))
	ps := r.stored["pipe"]
	if len(ps) > 1 {
		inc := median64(ps[1:])
		sr := float64(inc) / float64(ps[0])
		w("| incremental vs pipe's full, stored | %s | %s | %.3f× | ≤ 0.06× | %s |\n", mib(inc), mib(ps[0]), sr, yesNo(sr <= 0.06))
	}
	for i, target := range []float64{0.8, 0.6} {
		ref := r.incr.refs[i]
		rm := ref.median()
		ratio := timeRatio(p, rm)
		st := r.stored[incrTools[i+1]]
		stored := ""
		if len(st) > 1 && len(ps) > 1 {
			stored = fmt.Sprintf(" (stored %s vs %s)", mib(median64(ps[1:])), mib(median64(st[1:])))
		}
		w("| incremental vs %s, time%s | %.2f s | %.2f s | %.2f× | ≤ %.2f× | %s |\n", ref.label, stored, p.Seconds(), rm.Seconds(), ratio, target, yesNo(ratio <= target))
	}
	for _, ref := range r.full.refs {
		w("| full (context) vs %s | %.2f s | %.2f s | %.2f× | | |\n", ref.label, pf.Seconds(), ref.median().Seconds(), timeRatio(pf, ref.median()))
	}
	rc, rf := r.restore.pipe.median(), r.restore.refs[0].median()
	ratio = timeRatio(rc, rf)
	w("| restore of full + %d vs the full alone | %.2f s | %.2f s | %.2f× | ≤ 1.20× | %s |\n", len(r.incr.pipe.times), rc.Seconds(), rf.Seconds(), ratio, yesNo(ratio <= 1.2))
	pgc := r.restore.refs[1].median()
	ratio = timeRatio(rc, pgc)
	w("| restore of full + %d vs fetch + extract + pg_combinebackup | %.2f s | %.2f s | %.2f× | ≤ 0.80× | %s |\n", len(r.incr.pipe.times), rc.Seconds(), pgc.Seconds(), ratio, yesNo(ratio <= 0.8))
	if len(r.combineAlone) > 0 {
		ca := median(r.combineAlone)
		w("| restore of full + %d vs pg_combinebackup alone (its input already extracted) | %.2f s | %.2f s | %.2f× | | |\n", len(r.incr.pipe.times), rc.Seconds(), ca.Seconds(), timeRatio(rc, ca))
	}
	if out := r.restoreDisk["pgc-out"]; out > 0 {
		extra := float64(r.restoreDisk["chain"]-out) / float64(out)
		staged := float64(r.restoreDisk["pgc"]-out) / float64(out)
		w("| disk at the end of the restore, staging included, over the cluster restored (%s, pg_combinebackup's output) | %s (%+.1f%%) | %s (%+.0f%%) | | extra ≤ 5%% | %s |\n",
			mib(out), mib(r.restoreDisk["chain"]), 100*extra, mib(r.restoreDisk["pgc"]), 100*staged, yesNo(extra <= 0.05))
	}
	for _, ph := range []string{"full", "incremental", "restore chain", "restore full"} {
		if peak, budget := r.pipePeak[ph], r.pipeBudget[ph]; peak > 0 && budget > 0 {
			w("| pipe's peak RSS, %s, every pipe process summed, vs its budget | %s | %s | %.2f× | ≤ 1.00× | %s |\n", ph, mib(peak), mib(budget), float64(peak)/float64(budget), yesNo(peak <= budget))
		}
	}
	w("\nStored bytes of each backup, in order (the full first):\n\n")
	for _, t := range incrTools {
		var parts []string
		for _, n := range r.stored[t] {
			parts = append(parts, mib(n))
		}
		w("- %s: %s\n", t, strings.Join(parts, ", "))
	}
	for _, ph := range []string{"full", "incremental"} {
		if runs := r.pipeRuns[ph]; len(runs) > 0 {
			w("\npipe's run summary, %s: bottleneck %s; %s.\n", ph, bottlenecks(runs), stageList(runs[len(runs)-1]))
		}
	}
	for _, n := range r.notes {
		w("\n- %s\n", n)
	}
}

func median64(xs []int64) int64 {
	d := make([]time.Duration, len(xs))
	for i, x := range xs {
		d[i] = time.Duration(x)
	}
	return int64(median(d))
}

// tlsMinIO is MinIO with a self-signed certificate, for pgBackRest, whose
// S3 repositories speak only TLS.
type tlsMinIO struct {
	port string // on localhost
	cert string // the certificate, on the host
	stop func()
}

// startTLSMinIO starts it, with the buckets made, its files under dir.
func startTLSMinIO(ctx context.Context, dir, mc string, buckets []string) (*tlsMinIO, error) {
	certDir := filepath.Join(dir, "certs")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return nil, err
	}
	crt, key, err := selfSigned()
	if err != nil {
		return nil, err
	}
	m := &tlsMinIO{cert: filepath.Join(certDir, "public.crt"), stop: func() {}}
	if err := os.WriteFile(m.cert, crt, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(certDir, "private.key"), key, 0o644); err != nil {
		return nil, err
	}
	dockerHost()
	c, err := tcminio.Run(ctx, minioImage, tcminio.WithUsername(minioUser), tcminio.WithPassword(minioSecret),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{HostFilePath: m.cert, ContainerFilePath: "/certs/public.crt", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: filepath.Join(certDir, "private.key"), ContainerFilePath: "/certs/private.key", FileMode: 0o644}),
		testcontainers.WithCmdArgs("--certs-dir", "/certs"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("9000/tcp")))
	if c != nil {
		m.stop = func() { _ = testcontainers.TerminateContainer(c) }
	}
	if err != nil {
		m.stop()
		return nil, fmt.Errorf("starting MinIO with TLS: %w", err)
	}
	hp, err := c.ConnectionString(ctx)
	if err != nil {
		m.stop()
		return nil, err
	}
	_, m.port, _ = net.SplitHostPort(hp)
	env := []string{"MC_HOST_" + mcAlias + "=https://" + minioUser + ":" + minioSecret + "@localhost:" + m.port, "MC_CONFIG_DIR=" + filepath.Join(dir, "mc-config"), "SSL_CERT_FILE=" + m.cert}
	deadline := time.Now().Add(30 * time.Second)
	for _, bucket := range buckets {
		for {
			_, err := timeCommand(ctx, []string{mc, "mb", mcAlias + "/" + bucket}, env...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				m.stop()
				return nil, err
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return m, nil
}
