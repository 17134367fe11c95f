package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The WAL archiving scenario (issue: PostgreSQL continuous archiving):
// pipe wal push and fetch against pgBackRest and barman-cloud, on the
// segments of one PostgreSQL 15 server on this host, into one MinIO that
// serves TLS (pgBackRest's S3 repository speaks nothing else).
//
// PostgreSQL's archiver is played by the harness: for each segment, in
// order, it runs the tool's archive_command in the data directory and,
// when it exits 0, renames archive_status/<segment>.ready to .done, as
// PostgreSQL does; the time until the last command returns is the time
// until all are archived. Recovery is played the same way: the
// restore_command of each segment in order, into pg_wal/RECOVERYXLOG,
// which is then consumed.

// walResult is the scenario's outcome.
type walResult struct {
	segments          int
	segSize           int64
	single            *race // one segment, whole process, sync
	burst             *race // n segments through the archiver loop
	fetch             *race // n segments through the recovery loop
	budget            int64
	deepBudget        int64      // of the archive that prefetches 64
	phases            []walPhase // every burst and fetch run, monitored
	versions          []string
	compressed        map[string]int64 // stored bytes of the burst, by tool
	pgbackrestWorkers int
}

func (b *bench) walScenario(ctx context.Context) (*walResult, error) {
	n := 256
	if b.cfg.quick {
		n = 32
	}
	logf("scenario: WAL archiving: pipe wal vs pgBackRest and barman-cloud, %d segments of 16 MiB", n)
	if err := needTools(lookPG, "apt-get install pgbackrest barman-cli-cloud postgresql-15",
		"pgbackrest", "barman-cloud-wal-archive", "barman-cloud-wal-restore", "initdb", "pg_ctl", "pgbench"); err != nil {
		return nil, err
	}
	// archive_command is pipe-wal, which answers for a file the pusher
	// or an earlier push noted without starting pipe.
	pipeWAL := filepath.Join(filepath.Dir(b.cfg.pipe), "pipe-wal")
	if _, err := os.Stat(pipeWAL); err != nil {
		return nil, fmt.Errorf("pipe-wal is not beside %s: make build writes both", b.cfg.pipe)
	}
	w, err := b.newWALBench(ctx, b.cfg.mc, n+16)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	res := &walResult{segments: n, segSize: 16 << 20, compressed: map[string]int64{}, pgbackrestWorkers: 2}
	res.versions = w.versions(ctx)
	files, err := w.archiveFiles()
	if err != nil {
		return nil, err
	}
	if res.budget, err = w.pipeBudget(ctx, files.async); err != nil {
		return nil, err
	}
	if res.deepBudget, err = w.pipeBudget(ctx, files.asyncDeep); err != nil {
		return nil, err
	}
	if err := w.pgbackrest(ctx, false, "stanza-create"); err != nil {
		return nil, err
	}
	wr := &walRaces{walBench: w, res: res, files: files, pipeWAL: pipeWAL, burstSegs: w.segs[16 : 16+n]}
	if res.single, err = wr.singleRace(ctx); err != nil {
		return nil, err
	}
	if res.burst, err = wr.burstRace(ctx); err != nil {
		return nil, err
	}
	if res.fetch, err = wr.fetchRace(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// archiveFiles are pipe's archive files: sync; async with a background
// pusher and prefetcher (background = "always": this VM's PID 1 reaps
// orphans, as systemd does on a server); async without (the official
// image's way, where nothing outlives the command PostgreSQL runs); and
// both async ones prefetching 64 segments (1 GiB, pgBackRest's queue as
// an operator tunes it for recovery) instead of 8.
type archiveFiles struct{ sync, async, inCommand, asyncDeep, inCommandDeep string }

func (w *walBench) archiveFiles() (archiveFiles, error) {
	in := func(name string) string { return filepath.Join(w.dir, name) }
	f := archiveFiles{in("pipe.hcl"), in("pipe-async.hcl"), in("pipe-incommand.hcl"), in("pipe-async-deep.hcl"), in("pipe-incommand-deep.hcl")}
	for file, a := range map[string]struct {
		async    bool
		bg       string
		prefetch int
	}{f.sync: {false, "auto", 8}, f.async: {true, "always", 8}, f.inCommand: {true, "never", 8}, f.asyncDeep: {true, "always", 64}, f.inCommandDeep: {true, "never", 64}} {
		if err := os.WriteFile(file, []byte(w.pipeArchive(a.async, a.bg, a.prefetch)), 0o644); err != nil {
			return f, err
		}
	}
	return f, nil
}

// walRaces are the scenario's three races on its server and MinIO.
type walRaces struct {
	*walBench
	res       *walResult
	files     archiveFiles
	pipeWAL   string   // archive_command's binary
	burstSegs []string // the burst's and the fetch's segments; the single pushes come before them
}

// singleRace pushes one segment, sync, whole process: a different segment
// each run (a second push of the same one would be a no-op for every
// tool), up to 15 times each.
func (w *walRaces) singleRace(ctx context.Context) (*race, error) {
	seg := func(rep int) string { return "pg_wal/" + w.segs[rep] }
	push := func(label, tool string, target float64, env []string, argv ...string) *contender {
		return &contender{label: label, target: target, clean: w.cleaner(ctx, tool), run: func(ctx context.Context, rep int) (measurement, error) {
			return w.run(ctx, env, append(argv[:len(argv):len(argv)], seg(rep))...)
		}}
	}
	r := &race{name: "push one 16 MiB segment, sync (whole process)", bytes: w.res.segSize,
		pipe: push("pipe wal push", "pipe", 0, w.pipeEnv(), w.b.cfg.pipe, "wal", "push", w.files.sync),
		refs: []*contender{
			push("pgbackrest archive-push", "pgbackrest", 1, w.pgbackrestEnv(false), "pgbackrest", "--stanza="+walStanza, "archive-push"),
			push("barman-cloud-wal-archive", "barman", 0, w.barmanEnv(), "barman-cloud-wal-archive", "-z", "--endpoint-url", w.endpoint, "s3://barman/wal", walBarmanID),
		}}
	r.refs[1].skip = w.b.cfg.skipBarman
	return r, r.run(ctx, min(max(w.b.cfg.reps*2+1, 5), 15))
}

// burstRace: the burst's segments ready at once, through the archiver
// loop, raceReps times each, no warm-up. Each run is monitored (watch).
func (w *walRaces) burstRace(ctx context.Context) (*race, error) {
	push := func(label, tool string, target float64, env []string, argv ...string) *contender {
		store := strings.TrimSuffix(tool, "-incommand")
		return &contender{label: label, target: target, clean: w.burstCleaner(ctx, store, w.burstSegs), run: func(ctx context.Context, rep int) (measurement, error) {
			m, err := w.watch(w.res, "burst", tool, rep, func() (measurement, error) { return w.archiver(ctx, w.burstSegs, env, argv...) })
			if tool != "pipe-incommand" {
				w.res.compressed[tool] = w.stored(ctx, tool)
			}
			return m, err
		}}
	}
	n := len(w.burstSegs)
	r := &race{name: fmt.Sprintf("a burst of %d segments (%s of WAL), until all are archived", n, mib(int64(n)*w.res.segSize)), bytes: int64(n) * w.res.segSize, noWarmup: true,
		pipe: push("pipe-wal (async, 4 workers, background pusher)", "pipe", 0, w.pipeEnv(), w.pipeWAL, "push", w.files.async),
		refs: []*contender{
			push("pgBackRest (async, process-max 2)", "pgbackrest", 1.2, w.pgbackrestEnv(true), "pgbackrest", "--stanza="+walStanza, "archive-push"),
			push("barman-cloud-wal-archive", "barman", 1.2, w.barmanEnv(), "barman-cloud-wal-archive", "-z", "--endpoint-url", w.endpoint, "s3://barman/wal", walBarmanID),
			push("pipe-wal (async, 4 workers, in archive_command)", "pipe-incommand", 0, w.pipeEnv(), w.pipeWAL, "push", w.files.inCommand),
		},
		notes: []string{"the harness plays PostgreSQL's archiver: one archive_command per ready segment, in order, each waited for (a segment an earlier command marked done is skipped, as PostgreSQL 15 and later skip it); pipe pushes ahead (async = true, workers = 4) by a background pusher (background = \"always\"; archive_command is pipe-wal push), and, in its second row, each archive_command sends its own and the next ready files (background = \"never\", what the official postgres image gets; it marks those it sent done but the newest, whose archive_command pipe-wal answers); pgBackRest runs its async process (archive-async, process-max = 2), barman-cloud-wal-archive has no async mode"}}
	r.refs[1].skip = w.b.cfg.skipBarman
	return r, r.run(ctx, w.raceReps())
}

// raceReps is how many times the burst and the fetch run each: -reps, up
// to 8; up to 3 with barman-cloud, whose burst takes 15 minutes.
func (w *walBench) raceReps() int {
	if w.b.cfg.skipBarman {
		return min(w.b.cfg.reps, 8)
	}
	return min(w.b.cfg.reps, 3)
}

// fetchRace: recovery, the same segments fetched in order as
// restore_command (every tool's archive holds them from the burst),
// raceReps times each, no warm-up. Each run is monitored (watch).
func (w *walRaces) fetchRace(ctx context.Context) (*race, error) {
	restoreDir := filepath.Join(w.dir, "restore")
	fetch := func(label, tool string, target float64, env []string, argv ...string) *contender {
		return &contender{label: label, target: target, clean: w.restoreCleaner(restoreDir), run: func(ctx context.Context, rep int) (measurement, error) {
			return w.watch(w.res, "fetch", tool, rep, func() (measurement, error) { return w.recovery(ctx, restoreDir, w.burstSegs, env, argv...) })
		}}
	}
	n := len(w.burstSegs)
	r := &race{name: fmt.Sprintf("fetch %d segments in order, as restore_command during recovery", n), bytes: int64(n) * w.res.segSize, noWarmup: true,
		pipe: fetch("pipe-wal (prefetch 8, background prefetcher)", "pipe", 0, w.pipeEnv(), w.pipeWAL, "fetch", w.files.async),
		refs: []*contender{
			fetch("pgBackRest (async archive-get)", "pgbackrest", 1.2, append(w.pgbackrestEnv(true), "PGBACKREST_PG1_PATH="+restoreDir), "pgbackrest", "--stanza="+walStanza, "archive-get"),
			fetch("barman-cloud-wal-restore", "barman", 1.2, w.barmanEnv(), "barman-cloud-wal-restore", "--endpoint-url", w.endpoint, "s3://barman/wal", walBarmanID),
			fetch("pipe-wal (prefetch 8, in restore_command)", "pipe-incommand", 0, w.pipeEnv(), w.pipeWAL, "fetch", w.files.inCommand),
			// pgBackRest tuned for recovery, as an operator who wants it
			// fast sets it: its queue holds 64 segments.
			fetch("pgBackRest (async archive-get, queue 1 GiB)", "pgbackrest-deep", 1.2,
				append(w.pgbackrestEnv(true), "PGBACKREST_PG1_PATH="+restoreDir, "PGBACKREST_ARCHIVE_GET_QUEUE_MAX=1GiB"), "pgbackrest", "--stanza="+walStanza, "archive-get"),
			// pipe tuned the same way: its spool holds 64 segments.
			fetch("pipe-wal (prefetch 64, background prefetcher)", "pipe-deep", 0, w.pipeEnv(), w.pipeWAL, "fetch", w.files.asyncDeep),
			fetch("pipe-wal (prefetch 64, in restore_command)", "pipe-incommand-deep", 0, w.pipeEnv(), w.pipeWAL, "fetch", w.files.inCommandDeep),
		},
		notes: []string{"the harness plays recovery: one restore_command per segment, in order, into pg_wal/RECOVERYXLOG, which it then checks and removes; restore_command is pipe-wal fetch, which takes a spooled segment itself (and starts the background prefetcher when none runs, then waits for its segment) and hands the rest to pipe wal fetch; pipe prefetches 8 segments (prefetch = 8) by a background prefetcher (background = \"always\"), and, in its second row, restore_command fetches the next 8 itself when the next one is not spooled (background = \"never\"); pgBackRest's async archive-get queues 128 MiB (8 segments, its default) and, in its second row, 1 GiB (64 segments); pipe's last two rows prefetch 64 segments (prefetch = 64, 1 GiB) the same two ways"}}
	r.refs[1].skip = w.b.cfg.skipBarman
	return r, r.run(ctx, w.raceReps())
}

// prefixes are each tool's objects in MinIO.
var walPrefixes = map[string]string{"pipe": "pipe/wal", "pgbackrest": "pgbackrest/repo/archive/" + walStanza + "/15-1", "barman": "barman/wal"}

// cleaner empties a tool's archive before its next run (its spool too).
func (w *walBench) cleaner(ctx context.Context, tool string) func() {
	return func() {
		_, _ = timeCommand(ctx, []string{w.mc, "rm", "--recursive", "--force", mcAlias + "/" + walPrefixes[tool] + "/"}, w.mcEnv...) // an empty archive is fine
		for _, d := range []string{"pipe-spool", "pgbackrest-spool"} {
			os.RemoveAll(filepath.Join(w.dir, d))
		}
	}
}

// burstCleaner also marks the burst's segments ready, and no other.
func (w *walBench) burstCleaner(ctx context.Context, tool string, segs []string) func() {
	clean := w.cleaner(ctx, tool)
	return func() {
		clean()
		status := filepath.Join(w.pgdata, "pg_wal", "archive_status")
		ents, _ := os.ReadDir(status)
		for _, e := range ents {
			os.Remove(filepath.Join(status, e.Name()))
		}
		for _, s := range segs {
			p := filepath.Join(status, s+".ready")
			if err := os.WriteFile(p, nil, 0o600); err == nil {
				_ = w.chown(p) // pgBackRest's async process renames nothing, but reads them
			}
		}
	}
}

// restoreCleaner makes an empty data directory to recover into: its
// pg_control (pipe and pgBackRest read the cluster's identity there) and
// an empty pg_wal.
func (w *walBench) restoreCleaner(dir string) func() {
	return func() {
		os.RemoveAll(dir)
		for _, d := range []string{dir, filepath.Join(dir, "global"), filepath.Join(dir, "pg_wal")} {
			_ = os.MkdirAll(d, 0o700)
			_ = w.chown(d)
		}
		b, err := os.ReadFile(filepath.Join(w.pgdata, "global", "pg_control"))
		if err == nil {
			p := filepath.Join(dir, "global", "pg_control")
			_ = os.WriteFile(p, b, 0o600)
			_ = w.chown(p)
		}
		ver := filepath.Join(dir, "PG_VERSION")
		_ = os.WriteFile(ver, []byte("15\n"), 0o600)
		_ = w.chown(ver)
		os.RemoveAll(filepath.Join(w.dir, "pgbackrest-spool"))
	}
}

// peaks are the largest sums of a tool's processes over the runs of a
// scenario, sampled: RSS and PSS of all of them (the commands PostgreSQL
// runs and the detached helpers), and RSS of the detached helpers alone.
func (r *walResult) peaks(scenario, tool string) (rss, pss, detached int64) {
	for _, ph := range r.phases {
		if ph.scenario == scenario && ph.tool == tool {
			rss, pss, detached = max(rss, ph.mon.toolPeakRSS), max(pss, ph.mon.toolPeakPSS), max(detached, ph.mon.detachedPeakRSS)
		}
	}
	return rss, pss, detached
}

// memoryTable compares the memory of every process of pipe and of
// pgBackRest, summed, in the burst and the fetch, and the largest pipe
// process with the budget pipe plan prints.
func (r *walResult) memoryTable(w writer) {
	w("\n### Memory: every process of each tool, summed\n\n")
	w("Sampled every 100 ms during each run from /proc: the RSS and the PSS of every process of the tool (the archive_command or restore_command PostgreSQL runs, and what it leaves running: pipe's background pusher or prefetcher, pgBackRest's async process), summed; the largest sum over the runs. RSS counts the pages of a binary each process maps in full in each (pipe's 45 MB of mapped binary, pgBackRest's 2 MB); PSS divides shared pages among their sharers, as a container's memory limit charges them once. Commands that live less than a sample can be missed (pgBackRest's and pipe-wal's short ones): the sums are lower bounds for both tools alike.\n\n")
	w.table("what", "pipe RSS", "pgBackRest RSS", "pipe / pgBackRest", "target", "met?", "pipe PSS", "pgBackRest PSS")
	row := func(what, sc, tool string) {
		ref := "pgbackrest"
		if strings.HasSuffix(tool, "-deep") {
			ref = "pgbackrest-deep" // a queue of 1 GiB against a spool of 64
		}
		p, pp, _ := r.peaks(sc, tool)
		g, gp, _ := r.peaks(sc, ref)
		if p == 0 || g == 0 {
			return
		}
		ratio := float64(p) / float64(g)
		w("| %s | %s | %s | %.2f× | ≤ 1.00× | %s | %s | %s |\n", what, mib(p), mib(g), ratio, yesNo(ratio <= 1), mib(pp), mib(gp))
	}
	row("burst, background pusher", "burst", "pipe")
	row("burst, pushed by archive_command itself (background = \"never\")", "burst", "pipe-incommand")
	row("fetch, background prefetcher", "fetch", "pipe")
	row("fetch, prefetched by restore_command itself (background = \"never\")", "fetch", "pipe-incommand")
	row("fetch, background prefetcher of 64, against pgBackRest's queue of 1 GiB", "fetch", "pipe-deep")
	row("fetch, 64 prefetched by restore_command itself, against pgBackRest's queue of 1 GiB", "fetch", "pipe-incommand-deep")
	_, _, pusher := r.peaks("burst", "pipe")
	_, _, prefetcher := r.peaks("fetch", "pipe")
	most := max(pusher, prefetcher)
	ratio := float64(r.budget) / float64(max(most, 1))
	w("\nThe largest pipe process (the background pusher: %s; the prefetcher: %s) against the budget `pipe plan` prints for any one pipe process of the archive, %s: %.2f× its peak (target: at least 1×, at most 1.5×): %s.\n",
		mib(pusher), mib(prefetcher), mib(r.budget), ratio, yesNo(ratio >= 1 && ratio <= 1.5))
	if _, _, deep := r.peaks("fetch", "pipe-deep"); deep > 0 && r.deepBudget > 0 {
		ratio := float64(r.deepBudget) / float64(deep)
		w("\nWith prefetch = 64, the prefetcher (%s) against its archive's budget, %s: %.2f× its peak (target: at least 1×): %s.\n",
			mib(deep), mib(r.deepBudget), ratio, yesNo(ratio >= 1))
	}
}

// whereTimeGoes writes, per scenario and tool, the medians of the
// monitored runs: the commands PostgreSQL would run (exact), the tool's
// detached helpers and MinIO (sampled), and the machine's busy time.
func (r *walResult) whereTimeGoes(w writer) {
	if len(r.phases) == 0 {
		return
	}
	w("\n### Where the time goes\n\nMedians over the runs. *commands* is the CPU of every archive_command or restore_command (rusage, exact); *detached* is the tool's helpers that outlive them (pipe's background pusher or prefetcher, pgBackRest's async process), *MinIO* the store's; both sampled from /proc every 100 ms; *busy* is all the machine's CPU time (2 CPUs: 2 × wall is all there is). *Long commands*: how many commands took 50 ms or more, and their time (where pipe pushes or fetches a batch in the command itself, its batches; the rest of the wall is the other commands, one after the other). Peak RSS: of all the tool's processes, and of the detached helpers alone, summed (sampled; see Memory).\n\n")
	w.table("scenario", "tool", "runs", "wall", "long commands", "commands CPU", "detached CPU", "MinIO CPU", "busy", "peak RSS, all", "peak RSS, detached")
	labels := map[string]string{"pipe": "pipe, background", "pipe-incommand": "pipe, in the command", "pgbackrest": "pgBackRest", "pgbackrest-deep": "pgBackRest, queue 1 GiB", "barman": "barman-cloud",
		"pipe-deep": "pipe, background, prefetch 64", "pipe-incommand-deep": "pipe, in the command, prefetch 64"}
	for _, sc := range []string{"burst", "fetch"} {
		for _, tool := range []string{"pipe", "pgbackrest", "pgbackrest-deep", "barman", "pipe-incommand", "pipe-deep", "pipe-incommand-deep"} {
			var wall, longWall, cmd, det, minio, busy []time.Duration
			var longN []int64
			var cmdRSS, detRSS int64
			for _, ph := range r.phases {
				if ph.scenario != sc || ph.tool != tool {
					continue
				}
				wall, cmd, det = append(wall, ph.m.wall), append(cmd, ph.m.cpu), append(det, ph.mon.detachedCPU)
				longWall, longN = append(longWall, ph.m.longWall), append(longN, int64(ph.m.long))
				minio, busy = append(minio, ph.mon.minioCPU), append(busy, ph.mon.busy)
				cmdRSS, detRSS = max(cmdRSS, ph.mon.toolPeakRSS), max(detRSS, ph.mon.detachedPeakRSS)
			}
			if len(wall) == 0 {
				continue
			}
			w("| %s | %s | %d | %.2f s | %d, %.2f s | %.1f s | %.1f s | %.1f s | %.1f s | %s | %s |\n", sc, labels[tool], len(wall), median(wall).Seconds(),
				median64(longN), median(longWall).Seconds(), median(cmd).Seconds(),
				median(det).Seconds(), median(minio).Seconds(), median(busy).Seconds(), mib(cmdRSS), mib(detRSS))
		}
	}
}

// walPhase is one monitored run of the burst or the fetch.
type walPhase struct {
	scenario, tool string // burst or fetch; pipe, pipe-incommand, pgbackrest, pgbackrest-deep, barman
	rep            int
	m              measurement
	mon            monitorTotals
}

// watch runs one measured run under a monitor and then, untimed, waits
// for the tool's detached helpers (pipe's background pusher or
// prefetcher, pgBackRest's async process) to exit: their CPU and memory
// are the run's, and the next run starts without them.
func (w *walBench) watch(res *walResult, scenario, tool string, rep int, run func() (measurement, error)) (measurement, error) {
	mon := startMonitor(w.watched(), false)
	m, err := run()
	if !mon.waitDetached(time.Minute) {
		logf("  %s, %s: a detached helper still runs a minute after the run", scenario, tool)
	}
	res.phases = append(res.phases, walPhase{scenario: scenario, tool: tool, rep: rep, m: m, mon: mon.stop()})
	return m, err
}

// archiver plays PostgreSQL's archiver over segs: argv plus the segment's
// path, in order, each waited for, then .ready renamed to .done; a segment
// whose .ready an earlier command renamed is skipped, as PostgreSQL 15
// and later skip it. maxRSS is the largest peak of one command.
func (w *walBench) archiver(ctx context.Context, segs []string, env []string, argv ...string) (measurement, error) {
	var total measurement
	start := time.Now()
	status := filepath.Join(w.pgdata, "pg_wal", "archive_status")
	for _, s := range segs {
		if _, err := os.Stat(filepath.Join(status, s+".ready")); errors.Is(err, os.ErrNotExist) {
			// Marked done by an earlier command, which archived it: as
			// PostgreSQL's archiver (15 and later) looks before each
			// command, it skips the file.
			continue
		}
		m, err := w.runIn(ctx, w.pgdata, env, append(argv[:len(argv):len(argv)], "pg_wal/"+s)...)
		total.addCommand(m)
		if err != nil {
			return total, err
		}
		if err := os.Rename(filepath.Join(status, s+".ready"), filepath.Join(status, s+".done")); err != nil {
			return total, err
		}
	}
	total.wall = time.Since(start)
	return total, nil
}

// recovery plays recovery over segs: argv plus the segment's name and
// pg_wal/RECOVERYXLOG, in order; each result is checked against the
// segment and removed.
func (w *walBench) recovery(ctx context.Context, dir string, segs []string, env []string, argv ...string) (measurement, error) {
	var total measurement
	start := time.Now()
	dest := filepath.Join(dir, "pg_wal", "RECOVERYXLOG")
	for i, s := range segs {
		m, err := w.runIn(ctx, dir, env, append(argv[:len(argv):len(argv)], s, "pg_wal/RECOVERYXLOG")...)
		total.addCommand(m)
		if err != nil {
			return total, err
		}
		// The first and every 32nd are compared byte for byte; all must
		// be whole segments.
		if i%32 == 0 {
			got, err := os.ReadFile(dest)
			if err != nil {
				return total, err
			}
			want, err := os.ReadFile(filepath.Join(w.pgdata, "pg_wal", s))
			if err != nil {
				return total, err
			}
			if !bytes.Equal(got, want) {
				return total, fmt.Errorf("%s restored differs from pg_wal's", s)
			}
		} else if fi, err := os.Stat(dest); err != nil || fi.Size() != 16<<20 {
			return total, fmt.Errorf("%s restored is not a whole segment (%v)", s, err)
		}
		os.Remove(dest)
	}
	total.wall = time.Since(start)
	return total, nil
}

// stored sums the sizes of a tool's archived objects.
func (w *walBench) stored(ctx context.Context, tool string) int64 {
	m, err := timeCommand(ctx, []string{w.mc, "du", "--json", mcAlias + "/" + walPrefixes[tool] + "/"}, w.mcEnv...)
	if err != nil {
		return 0
	}
	var du struct {
		Size int64 `json:"size"`
	}
	_ = json.Unmarshal(bytes.TrimSpace(m.stdout), &du) // 0 when mc says otherwise
	return du.Size
}

func (r *walResult) races() []*race { return []*race{r.single, r.burst, r.fetch} }

func (r *walResult) markdown(w writer) {
	w("\n## WAL archiving (PostgreSQL 15, MinIO with TLS)\n\n")
	w("Tools: %s. Each archives into its own bucket of one MinIO; pipe and pgBackRest compress with zstd level 3, barman-cloud with gzip (`-z`: it has no zstd). Medians.\n\n", strings.Join(r.versions, "; "))
	w.table("what", "pipe", "pgBackRest", "barman-cloud", "pipe / fastest peer", "target", "met?")
	// row compares pipe with pg, a pgBackRest contender, or, with faster,
	// the faster of it and barman-cloud's bc: how many times as fast pipe
	// is. bc, shown unless nil, is barman-cloud's run of the scenario.
	row := func(what string, pipe, pg, bc *contender, faster bool, target float64, targetText string) {
		p, best := pipe.median(), pg.median()
		bcText := ""
		if bc != nil {
			bcText = "not run"
			if d := bc.median(); d != 0 {
				bcText = fmt.Sprintf("%.3f s", d.Seconds())
			}
			if faster {
				best = fastestMedian(best, bc.median())
			}
		}
		ratio := speedup(p, best)
		w("| %s | %.3f s | %.3f s | %s | %.2f× as fast | %s | %s |\n", what, p.Seconds(), pg.median().Seconds(), bcText, ratio, targetText, yesNo(ratio >= target))
	}
	single, burst, fetch := r.single.refs, r.burst.refs, r.fetch.refs
	row("push one segment, sync, whole process", r.single.pipe, single[0], single[1], false, 1.0, "≥ 1.0× pgBackRest (≤ its time)")
	row(r.burst.name+", background pusher", r.burst.pipe, burst[0], burst[1], true, 1.2, "≥ 1.2×")
	row(r.fetch.name+", background prefetcher", r.fetch.pipe, fetch[0], fetch[1], true, 1.2, "≥ 1.2×")
	row("the burst, pushed ahead by archive_command itself (background = \"never\")", burst[2], burst[0], burst[1], true, 1.2, "≥ 1.2×")
	row("the fetch, prefetched by restore_command itself (background = \"never\")", fetch[2], fetch[0], fetch[1], true, 1.2, "≥ 1.2×")
	if len(fetch) > 3 {
		row("the fetch, background prefetcher, against pgBackRest's queue of 1 GiB", r.fetch.pipe, fetch[3], nil, false, 1.2, "≥ 1.2×")
		row("the fetch, prefetched by restore_command itself, against pgBackRest's queue of 1 GiB", fetch[2], fetch[3], nil, false, 1.2, "≥ 1.2×")
	}
	if len(fetch) > 5 {
		row("the fetch, background prefetcher of 64 (1 GiB), against pgBackRest's queue of 1 GiB", fetch[4], fetch[3], nil, false, 1.2, "≥ 1.2×")
		row("the fetch, 64 prefetched by restore_command itself, against pgBackRest's queue of 1 GiB", fetch[5], fetch[3], nil, false, 1.2, "≥ 1.2×")
	}
	r.memoryTable(w)
	r.whereTimeGoes(w)
	if len(r.compressed) > 0 {
		w("\nStored after the burst (%s of WAL): pipe %s, pgBackRest %s, barman-cloud %s.\n", mib(int64(r.segments)*r.segSize),
			mib(r.compressed["pipe"]), mib(r.compressed["pgbackrest"]), mib(r.compressed["barman"]))
	}
	for _, s := range []*race{r.burst, r.fetch} {
		for _, n := range s.notes {
			w("\n- %s: %s\n", s.name, n)
		}
	}
}
