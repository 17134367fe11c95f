package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The base backup scenario (issue: physical base backups and PITR): one
// PostgreSQL 15 server on this host with a pgbench database, one MinIO
// with TLS, and three tools taking a full base backup of it and then
// restoring it and recovering to the end of the archive: pipe
// (postgres_basebackup source and sink, pipe wal fetch), pgBackRest
// (backup --type=full, restore, archive-get; process-max 2, zstd 3) and
// barman-cloud (barman-cloud-backup -J 2 gzip, barman-cloud-restore,
// barman-cloud-wal-restore).
//
// The server archives to all three archives with one archive_command,
// archive.sh: the tool being measured pushes synchronously (its backup
// waits for that push and for nothing else), the other two are queued in
// the background, one push at a time per tool, and the harness waits for
// every queue to drain before the next measurement. So every archive holds
// every segment and no tool's backup waits for another tool's archiving.
//
// Where the time goes: during each measured phase a monitor samples /proc
// every 100 ms (the CPU time and RSS of PostgreSQL's processes, MinIO's,
// the tool's, and the machine's busy, iowait and disk counters); the tool's
// own commands are timed exactly (rusage of the command and its waited-for
// children), and restore_command runs under a wrapper that logs its wall
// and its children's CPU time, so recovery splits into waiting for WAL and
// replaying it.

const (
	basePort     = 55433 // the restored servers'
	baseBarmanID = "bench"
)

// baseTools are the contenders, in run order.
var baseTools = []string{"pipe", "pgbackrest", "barman"}

var baseToolLabel = map[string]string{"pipe": "pipe", "pgbackrest": "pgBackRest", "barman": "barman-cloud", pipeLight: "pipe, profile conservative"}

// pipeLight is pipe's base backup with profile = "conservative": the light
// guest on the database host (issue 39), in memory against pgBackRest's.
// It is a fourth contender of the backup race only.
const pipeLight = "pipe-light"

// baseResult is the scenario's outcome.
type baseResult struct {
	scale, segments int
	clusterSize     int64 // bytes of the data directory's databases
	dbSize          int64 // the bench database
	walBytes        int64 // WAL written after the backups, to recover
	versions        []string
	backup, restore *race
	phases          []basePhase                 // every measured run, in order
	stored          map[string]int64            // bytes of the last backup, by tool
	replayed        map[string]int64            // bytes of WAL the last restore replayed, by tool
	pipeRuns        map[string][]pipelineRun    // pipe's summaries, by phase
	rss             map[string]map[string]int64 // phase → tool → peak
	notes           []string
}

// basePhase is one measured run and where its time went.
type basePhase struct {
	phase, tool string
	rep         int
	wall        time.Duration
	cmdCPU      time.Duration // the tool's command(s), exact
	cmdWall     time.Duration // the restore command alone (restore phase)
	rcCPU       time.Duration // restore_command's children, exact
	rcWall      time.Duration // recovery waiting on restore_command
	rcCalls     int
	// PostgreSQL's own account of the replay (the startup process's
	// rusage, without restore_command's): "redo done at … system usage".
	redoCPU, redoElapsed time.Duration
	mon                  monitorTotals
}

func (b *bench) baseBackupScenario(ctx context.Context) (*baseResult, error) {
	mc := b.cfg.mc
	scale, n := 90, 256
	if b.cfg.quick {
		scale, n = 10, 32
	}
	logf("scenario: PostgreSQL base backup and recovery: pipe vs pgBackRest and barman-cloud, pgbench scale %d, %d segments of WAL to recover", scale, n)
	if err := needTools(lookPG, "apt-get install pgbackrest barman-cli-cloud postgresql-15 util-linux",
		"pgbackrest", "barman-cloud-backup", "barman-cloud-restore", "barman-cloud-wal-archive", "barman-cloud-wal-restore", "initdb", "pg_ctl", "pgbench", "psql", "flock", "bash"); err != nil {
		return nil, err
	}
	w, err := b.newWALBench(ctx, mc, 0)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	res := &baseResult{scale: scale, segments: n, stored: map[string]int64{}, replayed: map[string]int64{},
		pipeRuns: map[string][]pipelineRun{}, rss: map[string]map[string]int64{"backup": {}, "restore": {}}}
	res.versions = w.versions(ctx)
	bb := &baseBench{walBench: w, res: res}
	if err := bb.setUp(ctx, scale); err != nil {
		return nil, err
	}
	defer bb.stopRestored()

	// Base backups, each tool's archive pushing synchronously in turn.
	cs := bb.contenders(func(tool string) func() { return bb.backupCleaner(ctx, tool) }, bb.backupRun)
	backup := &race{name: fmt.Sprintf("full base backup of the server (%s) to MinIO", mib(res.clusterSize)), bytes: res.clusterSize, noWarmup: true,
		pipe: cs[0], refs: cs[1:]}
	backup.refs[1].skip = b.cfg.skipBarman
	backup.refs = append(backup.refs, &contender{label: baseToolLabel[pipeLight], clean: bb.backupCleaner(ctx, pipeLight),
		run: func(ctx context.Context, rep int) (measurement, error) { return bb.backupRun(ctx, pipeLight, rep) }})
	if err := backup.run(ctx, b.cfg.reps); err != nil {
		return nil, bb.withLog(err)
	}
	res.backup = backup

	// WAL after the backups, in every archive.
	if err := bb.makeWAL(ctx, n); err != nil {
		return nil, bb.withLog(err)
	}

	// Restore the newest backup and recover to the end of the archive.
	cs = bb.contenders(func(string) func() { return bb.restoreCleaner(ctx) }, bb.restoreRun)
	restore := &race{name: fmt.Sprintf("restore the newest backup and recover %d segments to the end of the archive", n), bytes: res.clusterSize, noWarmup: true,
		pipe: cs[0], refs: cs[1:]}
	restore.refs[1].skip = b.cfg.skipBarman
	if err := restore.run(ctx, b.cfg.reps); err != nil {
		return nil, bb.withLog(err)
	}
	res.restore = restore
	return res, nil
}

// contenders are the tools, pipe first, each with its clean and its run.
func (bb *baseBench) contenders(clean func(tool string) func(), run func(ctx context.Context, tool string, rep int) (measurement, error)) []*contender {
	var cs []*contender
	for _, tool := range baseTools {
		cs = append(cs, &contender{label: baseToolLabel[tool], clean: clean(tool),
			run: func(ctx context.Context, rep int) (measurement, error) { return run(ctx, tool, rep) }})
	}
	return cs
}

// baseBench is the scenario's state on top of the WAL scenario's server
// and MinIO.
type baseBench struct {
	*walBench
	res        *baseResult
	restoreDir string
	endMark    string // the last row written before the end of the archive
	endLSN     string
	restored   bool // a restored server may be running
	// stored bytes of each tool's backups before the current run.
	storedBefore int64
}

// setUp loads the bench database, restarts the server archiving through
// archive.sh, and creates pgBackRest's stanza.
func (bb *baseBench) setUp(ctx context.Context, scale int) error {
	w := bb.walBench
	bb.restoreDir = filepath.Join(w.dir, "restored")
	start := time.Now()
	if _, err := w.psql(ctx, "CREATE DATABASE bench"); err != nil {
		return err
	}
	pgbench, _ := lookPG("pgbench")
	if _, err := w.run(ctx, nil, pgbench, "-h", w.dir, "-p", strconv.Itoa(w.port), "-U", walPGUser, "-i", "-q", "-s", strconv.Itoa(scale), "bench"); err != nil {
		return fmt.Errorf("pgbench -i: %w", err)
	}
	if _, err := bb.psqlAt(ctx, w.port, "bench", "CREATE TABLE marks (id serial PRIMARY KEY, note text NOT NULL)"); err != nil {
		return err
	}
	sizes, err := w.psql(ctx, "SELECT sum(pg_database_size(oid)), pg_database_size('bench') FROM pg_database")
	if err != nil {
		return err
	}
	f := strings.Split(sizes, "|")
	bb.res.clusterSize, _ = strconv.ParseInt(f[0], 10, 64)
	bb.res.dbSize, _ = strconv.ParseInt(f[len(f)-1], 10, 64)
	logf("  bench database: pgbench scale %d, %s (cluster %s), loaded in %s", scale, mib(bb.res.dbSize), mib(bb.res.clusterSize), time.Since(start).Round(time.Second))

	// The archive scripts, then a restart with archive_mode = on (the
	// WAL of the load is not archived: every backup starts after it).
	if err := bb.writeScripts(); err != nil {
		return err
	}
	pgctl, _ := lookPG("pg_ctl")
	if _, err := w.run(ctx, nil, pgctl, "-D", w.pgdata, "-m", "fast", "-w", "stop"); err != nil {
		return err
	}
	opts := w.serverOpts() + " -c archive_mode=on -c wal_level=replica -c max_wal_senders=10"
	if _, err := w.run(ctx, nil, pgctl, "-D", w.pgdata, "-l", filepath.Join(w.dir, "pg.log"), "-o", opts, "-w", "start"); err != nil {
		return fmt.Errorf("restarting PostgreSQL with archive_mode = on: %w", err)
	}
	if err := w.pgbackrest(ctx, true, "stanza-create"); err != nil {
		return err
	}
	// pgBackRest's backup refuses an archive_command without its name
	// (a substring check); the comment names it: archive.sh does run it.
	if _, err := w.psql(ctx, fmt.Sprintf("ALTER SYSTEM SET archive_command = '%s %%p # runs pgbackrest archive-push too'", filepath.Join(w.dir, "archive.sh"))); err != nil {
		return err
	}
	if _, err := w.psql(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	if _, err := w.psql(ctx, "SELECT pg_switch_wal()"); err != nil {
		return err
	}
	return bb.drain(ctx)
}

func (bb *baseBench) psqlAt(ctx context.Context, port int, db, sql string) (string, error) {
	psql, _ := lookPG("psql")
	m, err := bb.run(ctx, nil, psql, "-X", "-A", "-t", "-h", bb.dir, "-p", strconv.Itoa(port), "-U", walPGUser, "-d", db, "-c", sql)
	return strings.TrimSpace(string(m.stdout)), err
}

// basePrefixes are each tool's backups in MinIO.
var basePrefixes = map[string]string{"pipe": "pipe/base/", "pgbackrest": "pgbackrest/repo/backup/", "barman": "barman/base/", pipeLight: "pipe/base-light/"}

func (bb *baseBench) du(ctx context.Context, tool string) int64 {
	m, err := timeCommand(ctx, []string{bb.mc, "du", "--json", mcAlias + "/" + basePrefixes[tool]}, bb.mcEnv...)
	if err != nil {
		return 0
	}
	var du struct {
		Size int64 `json:"size"`
	}
	_ = json.Unmarshal([]byte(strings.TrimSpace(string(m.stdout))), &du) // 0 when there is nothing yet
	return du.Size
}

// backupCleaner makes the tool the synchronous archiver and waits until
// every archive is up to date.
func (bb *baseBench) backupCleaner(ctx context.Context, tool string) func() {
	return func() {
		if err := bb.drain(ctx); err != nil {
			logf("  warning: %v", err)
		}
		_ = bb.setFirst(strings.TrimSuffix(tool, "-light")) // pipe's archive, for pipe-light too
		bb.storedBefore = bb.du(ctx, tool)
	}
}

// pipeBaseFile writes pipe's base backup pipeline: with the default
// profile, or, light, with profile = "conservative", to its own prefix.
func (bb *baseBench) pipeBaseFile(light bool) (string, error) {
	w := bb.walBench
	p := filepath.Join(w.dir, "pipe-base.hcl")
	profile, prefix := "", "base"
	if light {
		p = filepath.Join(w.dir, "pipe-base-light.hcl")
		profile, prefix = "  profile = \"conservative\"\n", "base-light"
	}
	text := fmt.Sprintf(`variable "secret" { sensitive = true }
pipeline "base" {
%s  source "postgres_basebackup" {
    host       = %q
    port       = %d
    user       = %q
    checkpoint = "fast"
    label      = "bench"
  }
  compress {
    codec = "zstd"
    level = 3
  }
  sink "s3" {
    bucket            = "pipe"
    key               = "%s/${run.id}/${stream.name}${stream.ext}"
    endpoint          = %q
    region            = "us-east-1"
    path_style        = true
    access_key_id     = %q
    secret_access_key = var.secret
  }
}
`, profile, w.dir, w.port, walPGUser, prefix, w.endpoint, minioUser)
	return p, os.WriteFile(p, []byte(text), 0o644)
}

func (bb *baseBench) pipeRestoreFile(restoreCommand string) (string, error) {
	w := bb.walBench
	p := filepath.Join(w.dir, "pipe-restore.hcl")
	text := fmt.Sprintf(`variable "secret" { sensitive = true }
pipeline "restore" {
  source "s3" {
    bucket            = "pipe"
    prefix            = "base/"
    endpoint          = %q
    region            = "us-east-1"
    path_style        = true
    access_key_id     = %q
    secret_access_key = var.secret
  }
  decompress {}
  sink "postgres_basebackup" {
    data_directory  = %q
    restore_command = %q
  }
}
`, w.endpoint, minioUser, bb.restoreDir, restoreCommand)
	return p, os.WriteFile(p, []byte(text), 0o644)
}

// asPG runs argv as PostgreSQL's user in the harness's folder.
func (bb *baseBench) asPG(ctx context.Context, argv []string, env ...string) (measurement, error) {
	return bb.runIn(ctx, bb.dir, env, argv...)
}

func (bb *baseBench) backupRun(ctx context.Context, tool string, rep int) (measurement, error) {
	w := bb.walBench
	mon := startMonitor(bb.watched(), false)
	var m measurement
	var err error
	switch tool {
	case "pipe", pipeLight:
		file, ferr := bb.pipeBaseFile(tool == pipeLight)
		if ferr != nil {
			return m, ferr
		}
		m, err = runPipeWith(ctx, bb.asPG, w.b.cfg.pipe, file, -1, w.pipeEnv()...)
		if err == nil && tool == "pipe" {
			bb.res.pipeRuns["backup"] = append(bb.res.pipeRuns["backup"], *m.summary)
		}
	case "pgbackrest":
		m, err = w.run(ctx, append(w.pgbackrestEnv(true), "PGBACKREST_REPO1_RETENTION_FULL=99"), "pgbackrest", "--stanza="+walStanza, "backup", "--type=full", "--start-fast")
	case "barman":
		m, err = w.runIn(ctx, w.dir, w.barmanEnv(), "barman-cloud-backup", "-z", "-J", "2", "--immediate-checkpoint", "-h", w.dir, "-p", strconv.Itoa(w.port),
			"-U", walPGUser, "-d", "postgres", "-n", fmt.Sprintf("bench-%d", rep), "--endpoint-url", w.endpoint, "s3://barman/base", baseBarmanID)
	}
	tot := mon.stop()
	if err != nil {
		return m, err
	}
	stored := bb.du(ctx, tool) - bb.storedBefore
	if stored <= 0 {
		return m, fmt.Errorf("%s stored nothing under %s", tool, basePrefixes[tool])
	}
	bb.res.stored[tool] = stored
	bb.res.rss["backup"][tool] = max(bb.res.rss["backup"][tool], tot.toolPeakRSS)
	bb.res.phases = append(bb.res.phases, basePhase{phase: "backup", tool: tool, rep: rep, wall: m.wall, cmdCPU: m.cpu, mon: tot})
	return m, nil
}

// makeWAL writes n segments of WAL after the backups (pgbench
// initialisations of another database), then a last row in bench.marks,
// and waits until every archive holds all of it.
func (bb *baseBench) makeWAL(ctx context.Context, n int) error {
	w := bb.walBench
	if err := bb.drain(ctx); err != nil {
		return err
	}
	_ = bb.setFirst("")
	start := time.Now()
	startLSN, err := w.psql(ctx, "SELECT pg_current_wal_lsn()")
	if err != nil {
		return err
	}
	if _, err := w.psql(ctx, "CREATE DATABASE churn"); err != nil {
		return err
	}
	pgbench, _ := lookPG("pgbench")
	for {
		done, err := w.psql(ctx, fmt.Sprintf("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '%s')::bigint", startLSN))
		if err != nil {
			return err
		}
		written, _ := strconv.ParseInt(done, 10, 64)
		if written >= int64(n)<<24 {
			bb.res.walBytes = written
			break
		}
		scale := 40
		if left := (int64(n)<<24 - written) >> 24; left < 40 {
			scale = max(int(left)/2, 2)
		}
		if _, err := w.run(ctx, nil, pgbench, "-h", w.dir, "-p", strconv.Itoa(w.port), "-U", walPGUser, "-i", "-q", "-s", strconv.Itoa(scale), "churn"); err != nil {
			return fmt.Errorf("pgbench: %w", err)
		}
		if _, err := w.psql(ctx, "CHECKPOINT"); err != nil {
			return err
		}
	}
	bb.endMark = fmt.Sprintf("end-%d", time.Now().UnixNano())
	if _, err := bb.psqlAt(ctx, w.port, "bench", fmt.Sprintf("INSERT INTO marks (note) VALUES ('%s')", bb.endMark)); err != nil {
		return err
	}
	bb.endLSN, _ = w.psql(ctx, "SELECT pg_current_wal_lsn()")
	if _, err := w.psql(ctx, "SELECT pg_switch_wal()"); err != nil {
		return err
	}
	logf("  %s of WAL written after the backups in %s; archiving it with every tool…", mib(bb.res.walBytes), time.Since(start).Round(time.Second))
	if err := bb.drain(ctx); err != nil {
		return err
	}
	logf("  archived by all three after %s", time.Since(start).Round(time.Second))
	return nil
}

// stopRestored stops a restored server, if one runs.
func (bb *baseBench) stopRestored() {
	if !bb.restored {
		return
	}
	if _, err := os.Stat(filepath.Join(bb.restoreDir, "postmaster.pid")); err == nil {
		pgctl, _ := lookPG("pg_ctl")
		_, _ = bb.run(context.Background(), nil, pgctl, "-D", bb.restoreDir, "-m", "immediate", "-w", "stop") // gone is fine
	}
	bb.restored = false
}

func (bb *baseBench) restoreCleaner(ctx context.Context) func() {
	return func() {
		bb.stopRestored()
		os.RemoveAll(bb.restoreDir)
		os.RemoveAll(filepath.Join(bb.dir, "pgbackrest-spool"))
		os.Remove(filepath.Join(bb.dir, "rc.log"))
		os.Remove(filepath.Join(bb.dir, "restored.log"))
		dropCaches()
	}
}

// dropCaches empties the page cache (root only), so that every restore
// starts from the same memory: the one after another's found the pages
// its predecessor's 5 GB data directory freed, and on this VM, which
// reports free memory to its host, memory not touched lately is slow to
// touch again. Recovery after the first restore of a run spent 3 s more
// kernel time in PostgreSQL's own writes than after the second
// (bench/reports/2026-11-26-basebackup-background.md).
func dropCaches() {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0); err != nil {
		logf("cannot drop the page cache before a restore (%v): restores after the first may be favoured", err)
	}
}

// restoreRun restores the newest backup with tool, starts the restored
// server and waits for the end of recovery, under the monitor: the wall
// time is all of it. It checks that recovery reached the end of the
// archive, and notes where the time went (bb.res.phases).
func (bb *baseBench) restoreRun(ctx context.Context, tool string, rep int) (measurement, error) {
	env, rc := bb.restoreCommand(tool)
	restore, err := bb.restoreTool(tool, env, rc)
	if err != nil {
		return measurement{}, err
	}
	settle()
	mon := startMonitor(bb.watched(), true)
	start := time.Now()
	m, err := restore(ctx)
	cmdWall := time.Since(start)
	startLSN := backupStartLSN(bb.restoreDir)
	var ms measurement
	if err == nil {
		ms, err = bb.recover(ctx, env, start)
	}
	wall := time.Since(start)
	tot := mon.stop()
	if err != nil {
		return m, err
	}
	cmdCPU := m.cpu
	m.wall, m.cpu = wall, m.cpu+ms.cpu
	if err := bb.recovered(ctx); err != nil {
		return m, err
	}
	bb.stopRestored()
	if tool == "pipe" {
		// pipe's background prefetcher exits once recovery asked past the
		// end of the archive, or was idle: before the directory goes.
		waitUnlocked(filepath.Join(bb.restoreDir, "pg_wal", "pipe-spool", "fetch", "prefetch.lock"))
	}
	ph := basePhase{phase: "restore", tool: tool, rep: rep, wall: wall, cmdCPU: cmdCPU, cmdWall: cmdWall, mon: tot}
	ph.rcCalls, ph.rcWall, ph.rcCPU = restoreCommandLog(filepath.Join(bb.dir, "rc.log"))
	ph.redoCPU, ph.redoElapsed = redoUsage(filepath.Join(bb.dir, "restored.log"))
	bb.res.phases = append(bb.res.phases, ph)
	bb.res.rss["restore"][tool] = max(bb.res.rss["restore"][tool], tot.toolPeakRSS)
	if startLSN != "" && bb.endLSN != "" {
		if d, err := bb.psql(ctx, fmt.Sprintf("SELECT pg_wal_lsn_diff('%s', '%s')::bigint", bb.endLSN, startLSN)); err == nil {
			bb.res.replayed[tool], _ = strconv.ParseInt(d, 10, 64)
		}
	}
	return m, nil
}

// restoreCommand is tool's environment and its restore_command, run
// under timed.sh, which logs each call's wall and CPU.
func (bb *baseBench) restoreCommand(tool string) (env []string, rc string) {
	timed := filepath.Join(bb.dir, "timed.sh")
	switch tool {
	case "pipe":
		// pipe-wal takes a prefetched segment itself, as the docs say to
		// install it, and hands the rest to pipe wal fetch.
		return bb.pipeEnv(), fmt.Sprintf("%s %s fetch %s %%f %%p", timed, filepath.Join(filepath.Dir(bb.b.cfg.pipe), "pipe-wal"), filepath.Join(bb.dir, "pipe-archive.hcl"))
	case "pgbackrest":
		return append(bb.pgbackrestEnv(true), "PGBACKREST_PG1_PATH="+bb.restoreDir), fmt.Sprintf(`%s pgbackrest --stanza=%s archive-get %%f "%%p"`, timed, walStanza)
	default: // barman
		return bb.barmanEnv(), fmt.Sprintf("%s barman-cloud-wal-restore --endpoint-url %s s3://barman/wal %s %%f %%p", timed, bb.endpoint, baseBarmanID)
	}
}

// restoreTool prepares tool's restore (pipe's pipeline file; the empty
// data directory the others restore into) and returns the command that
// restores the newest backup into bb.restoreDir with restore_command rc.
func (bb *baseBench) restoreTool(tool string, env []string, rc string) (func(ctx context.Context) (measurement, error), error) {
	if tool == "pipe" {
		file, err := bb.pipeRestoreFile(rc)
		if err != nil {
			return nil, err
		}
		return func(ctx context.Context) (measurement, error) {
			m, err := runPipeWith(ctx, bb.asPG, bb.b.cfg.pipe, file, -1, env...)
			if err == nil {
				bb.res.pipeRuns["restore"] = append(bb.res.pipeRuns["restore"], *m.summary)
			}
			return m, err
		}, nil
	}
	// pgBackRest restores into an existing, empty directory;
	// barman-cloud-restore's would be 0755, which PostgreSQL refuses.
	if err := os.MkdirAll(bb.restoreDir, 0o700); err != nil {
		return nil, err
	}
	_ = bb.chown(bb.restoreDir)
	if tool == "pgbackrest" {
		return func(ctx context.Context) (measurement, error) {
			return bb.asPG(ctx, []string{"pgbackrest", "--stanza=" + walStanza, "restore", "--recovery-option=restore_command=" + rc}, env...)
		}, nil
	}
	return func(ctx context.Context) (measurement, error) {
		m, err := bb.asPG(ctx, []string{"barman-cloud-restore", "--endpoint-url", bb.endpoint, "s3://barman/base", baseBarmanID, fmt.Sprintf("bench-%d", bb.b.cfg.reps), bb.restoreDir}, env...)
		if err == nil {
			// barman-cloud-restore writes no recovery settings: what its
			// documentation has the user add.
			err = bb.appendRecovery(rc)
		}
		return m, err
	}, nil
}

// recover starts the restored server and waits for the end of recovery
// (the promotion: postmaster.pid says "ready", not "standby"), at most 30
// minutes after start; it returns pg_ctl's measurement.
func (bb *baseBench) recover(ctx context.Context, env []string, start time.Time) (measurement, error) {
	pgctl, _ := lookPG("pg_ctl")
	opts := fmt.Sprintf("-c port=%d -c listen_addresses='' -c unix_socket_directories=%s -c archive_mode=off -c max_wal_size=16GB -c checkpoint_timeout=1h -c fsync=off", basePort, bb.dir)
	bb.restored = true
	ms, err := bb.runIn(ctx, bb.dir, env, pgctl, "-D", bb.restoreDir, "-l", filepath.Join(bb.dir, "restored.log"), "-o", opts, "-w", "-t", "1800", "start")
	if err != nil {
		return ms, err
	}
	for !bb.promoted(ctx) {
		if time.Since(start) > 30*time.Minute {
			return ms, fmt.Errorf("still recovering after 30 minutes")
		}
		select {
		case <-ctx.Done():
			return ms, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return ms, nil
}

// recovered checks that the recovery reached the end of the archive (the
// last row is there) and that the server left recovery.
func (bb *baseBench) recovered(ctx context.Context) error {
	got, err := bb.psqlAt(ctx, basePort, "bench", "SELECT note FROM marks ORDER BY id DESC LIMIT 1")
	if err != nil {
		return err
	}
	if got != bb.endMark {
		return fmt.Errorf("the restored server's last mark is %q, want %q: recovery stopped before the end of the archive", got, bb.endMark)
	}
	if inRec, _ := bb.psqlAt(ctx, basePort, "postgres", "SELECT pg_is_in_recovery()"); inRec != "f" {
		return fmt.Errorf("the restored server is still in recovery (%q)", inRec)
	}
	return nil
}

// appendRecovery writes recovery.signal and restore_command, as
// barman-cloud-restore's users do.
func (bb *baseBench) appendRecovery(rc string) error {
	conf := filepath.Join(bb.restoreDir, "postgresql.auto.conf")
	f, err := os.OpenFile(conf, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "restore_command = '%s'\n", strings.ReplaceAll(rc, "'", "''"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	sig := filepath.Join(bb.restoreDir, "recovery.signal")
	if err := os.WriteFile(sig, nil, 0o600); err != nil {
		return err
	}
	_ = bb.chown(conf)
	return bb.chown(sig)
}

// promoted reports whether the restored server has left recovery: the
// startup process removes recovery.signal at the end of archive recovery
// (a stat every 50 ms costs nothing), then pg_is_in_recovery() says so.
func (bb *baseBench) promoted(ctx context.Context) bool {
	if _, err := os.Stat(filepath.Join(bb.restoreDir, "recovery.signal")); err == nil {
		return false
	}
	r, err := bb.psqlAt(ctx, basePort, "postgres", "SELECT pg_is_in_recovery()")
	return err == nil && r == "f"
}

func (r *baseResult) races() []*race { return []*race{r.backup, r.restore} }

func (r *baseResult) markdown(w writer) {
	w("\n## PostgreSQL base backup and recovery (PostgreSQL 15, MinIO with TLS)\n\n")
	w("Tools: %s. One server (pgbench scale %d: the bench database %s, the cluster %s), one MinIO, one run; pipe and pgBackRest compress with zstd level 3, barman-cloud with gzip (it has no zstd); no tool encrypts. pgBackRest: process-max 2; barman-cloud-backup: -J 2. Medians of %d run(s) each.\n\n",
		strings.Join(r.versions, "; "), r.scale, mib(r.dbSize), mib(r.clusterSize), len(r.backup.pipe.times))
	w.table("what", "pipe", "pgBackRest", "barman-cloud", "pipe / faster peer", "target", "met?")
	row := func(what string, s *race) {
		p := s.pipe.median()
		pg, bc := s.refs[0].median(), s.refs[1].median()
		ratio := timeRatio(p, fastestMedian(pg, bc))
		w("| %s | %.1f s | %.1f s | %.1f s | %.2f× | ≤ 0.80× | %s |\n", what, p.Seconds(), pg.Seconds(), bc.Seconds(), ratio, yesNo(ratio <= 0.8))
	}
	row("base backup, wall", r.backup)
	if len(r.backup.refs) > 2 {
		light, pg := r.backup.refs[2].median(), r.backup.refs[0].median()
		ratio := timeRatio(light, pg)
		w("| base backup, pipe with `profile = \"conservative\"`, wall | %.1f s | %.1f s | | %.2f× pgBackRest | ≤ 0.80× | %s |\n", light.Seconds(), pg.Seconds(), ratio, yesNo(ratio <= 0.8))
	}
	row(fmt.Sprintf("restore + recover %s of WAL to the end, wall", mib(r.walBytes)), r.restore)
	if l, g := r.rss["backup"][pipeLight], r.rss["backup"]["pgbackrest"]; l > 0 && g > 0 {
		ratio := float64(l) / float64(g)
		w("| peak RSS, backup, pipe with `profile = \"conservative\"`, every process summed (PSS) | %s (%s) | %s (%s) | | %.2f× | ≤ 1.50× pgBackRest | %s |\n",
			mib(l), mib(r.peakPSS("backup", pipeLight)), mib(g), mib(r.peakPSS("backup", "pgbackrest")), ratio, yesNo(ratio <= 1.5))
	}
	for _, ph := range []string{"backup", "restore"} {
		p, g := r.rss[ph]["pipe"], r.rss[ph]["pgbackrest"]
		ratio, target, met := "", "", ""
		if ph == "backup" && p > 0 && g > 0 {
			ratio, target, met = fmt.Sprintf("%.2f×", float64(p)/float64(g)), "≤ 1.50× pgBackRest", yesNo(float64(p) <= 1.5*float64(g))
		}
		w("| peak RSS, %s, every process summed (PSS) | %s (%s) | %s (%s) | %s (%s) | %s | %s | %s |\n", ph, mib(p), mib(r.peakPSS(ph, "pipe")),
			mib(g), mib(r.peakPSS(ph, "pgbackrest")), mib(r.rss[ph]["barman"]), mib(r.peakPSS(ph, "barman")), ratio, target, met)
	}
	w("| stored backup | %s | %s | %s | | | |\n", mib(r.stored["pipe"]), mib(r.stored["pgbackrest"]), mib(r.stored["barman"]))
	w("| WAL replayed (backup start → end) | %s | %s | %s | | | |\n", mib(r.replayed["pipe"]), mib(r.replayed["pgbackrest"]), mib(r.replayed["barman"]))
	r.phasesMarkdown(w)
	for _, ph := range []string{"backup", "restore"} {
		if runs := r.pipeRuns[ph]; len(runs) > 0 {
			w("\npipe's run summary, %s: bottleneck %s; %s.\n", ph, bottlenecks(runs), stageList(runs[len(runs)-1]))
		}
	}
	for _, n := range r.notes {
		w("\n- %s\n", n)
	}
}

// peakPSS is the largest sum of a tool's PSS over the runs of a phase.
func (r *baseResult) peakPSS(phase, tool string) int64 {
	var peak int64
	for _, ph := range r.phases {
		if ph.phase == phase && ph.tool == tool {
			peak = max(peak, ph.mon.toolPeakPSS)
		}
	}
	return peak
}

// phasesMarkdown writes where each run's time went.
func (r *baseResult) phasesMarkdown(w writer) {
	w("\n### Where the time goes\n\n")
	w("CPU seconds during each run (the machine has 2 CPUs, so 2 × wall is all there is). *tool* is the tool's own commands, exact (rusage of the command and its waited-for children: `pipe run`, `pgbackrest backup|restore`, `barman-cloud-backup|restore`; for restores also `pg_ctl`), plus, for recovery, restore_command (exact, from a wrapper's `times`) and any detached helper (sampled: pgBackRest's async archive-get); *PostgreSQL* and *MinIO* are sampled from /proc every 100 ms; *archiving* is the other tools' queued archive pushes and the measured tool's synchronous one (sampled); *other* is the machine's busy time less all of those (the harness, the kernel's own work, neighbours). Recovery splits into the restore command, then the server's start and recovery, of which *waiting for WAL* is the sum of restore_command's wall times.\n\n")
	w.table("phase", "tool", "run", "wall", "tool CPU", "PostgreSQL CPU", "MinIO CPU", "archiving CPU", "other CPU (largest)", "iowait", "disk read / written", "restore cmd wall", "restore_command: calls, wall (CPU)", "replay: CPU, elapsed (PostgreSQL's log)")
	for _, p := range r.phases {
		tool := p.cmdCPU + p.rcCPU + p.mon.detachedCPU
		other := p.mon.busy - tool - p.mon.pgCPU - p.mon.minioCPU - p.mon.archiveCPU
		rcmd, rcs, redo := "", "", ""
		if p.phase == "restore" {
			rcmd = fmt.Sprintf("%.1f s", p.cmdWall.Seconds())
			rcs = fmt.Sprintf("%d, %.1f s (%.1f s)", p.rcCalls, p.rcWall.Seconds(), p.rcCPU.Seconds())
			redo = fmt.Sprintf("%.1f s, %.1f s", p.redoCPU.Seconds(), p.redoElapsed.Seconds())
		}
		other -= p.mon.originCPU
		pg := fmt.Sprintf("%.1f s", p.mon.pgCPU.Seconds())
		if p.mon.originCPU >= 100*time.Millisecond {
			pg += fmt.Sprintf(" (+ %.1f s the backed-up server's)", p.mon.originCPU.Seconds())
		}
		w("| %s | %s | %d | %.1f s | %.1f s | %s | %.1f s | %.1f s | %.1f s (%s) | %.1f s | %s / %s | %s | %s | %s |\n", p.phase, baseToolLabel[p.tool], p.rep, p.wall.Seconds(),
			tool.Seconds(), pg, p.mon.minioCPU.Seconds(), p.mon.archiveCPU.Seconds(), max(other, 0).Seconds(), p.mon.others, p.mon.iowait.Seconds(),
			mb(p.mon.diskRead), mb(p.mon.diskWrite), rcmd, rcs, redo)
	}
}
