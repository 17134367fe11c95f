package main

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/report.golden.md from the report the fakes render")

// ms is n milliseconds.
func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// msList is durations in milliseconds.
func msList(ns ...int) []time.Duration {
	out := make([]time.Duration, len(ns))
	for i, n := range ns {
		out[i] = ms(n)
	}
	return out
}

// fakeContender is a contender that ran len(wall) times.
func fakeContender(label string, target float64, wall []int, cpu []int, maxRSS int64) *contender {
	return &contender{label: label, target: target, times: msList(wall...), cpu: msList(cpu...), maxRSS: maxRSS}
}

// fakeRace is a race whose contenders ran round-robin, as interleave runs
// them: the run order of "Every run" follows from their times.
func fakeRace(name, data string, bytes int64, pipe *contender, refs ...*contender) *race {
	s := &race{name: name, data: data, bytes: bytes, pipe: pipe, refs: refs}
	all := append([]*contender{pipe}, refs...)
	for i := range pipe.times {
		for _, c := range all {
			if i < len(c.times) {
				s.runOrder = append(s.runOrder, c.label)
				s.runTimes = append(s.runTimes, c.times[i])
			}
		}
	}
	return s
}

// fakeSummary is pipe's JSON summary of a run with a source, a compress
// stage on 2 workers and a sink.
func fakeSummary(bottleneck string, seconds float64) pipelineRun {
	return pipelineRun{Pipeline: "p", OK: true, Seconds: seconds, Bottleneck: bottleneck, Stages: []stageMeter{
		{Name: "source", Workers: 1, Utilization: 0.06, BlockedNS: int64(3 * time.Second)},
		{Name: "compress", Workers: 2, Utilization: 0.99, WaitInNS: int64(20 * time.Millisecond), BlockedNS: int64(3290 * time.Millisecond)},
		{Name: "sink fs", Workers: 1, Utilization: 0.05, WaitInNS: int64(3150 * time.Millisecond)},
	}}
}

// fakeReport is a report of every scenario, from made-up results.
func fakeReport() *report {
	const size = 600_000_000
	r := &report{
		env: environment{date: "2026-11-28 12:00:00 UTC", cpu: "AMD EPYC", cpus: 2, memory: "24682416 kB", kernel: "Linux 6.18 x86_64",
			goVersion: "go1.26.8", zstd: "zstd v1.5.4", cp: "cp (GNU coreutils) 9.1", pipe: "pipe version abc1234",
			fs: "ext4 /dev/vda", loadStart: "1.00 1.00 1.00", loadEnd: "2.00 2.00 2.00"},
		cfg:     config{pipe: "/work/bin/pipe", workDir: "bench/results", reps: 3},
		command: "go run ./bench -pipe ./bin/pipe -reps 3",
	}
	label := "pg_dump text, 600 MB"
	copyRace := fakeRace("fs → fs copy, no stages", label, size,
		fakeContender("pipe", 0, []int{400, 420, 410}, []int{300, 310, 305}, 50<<20),
		fakeContender("cp", 0.9, []int{320, 330, 325}, []int{200, 200, 200}, 2<<20),
		fakeContender("cp + sync -d", 0.9, []int{590, 600, 610}, []int{210, 220, 230}, 2<<20))
	copyRace.pipeRuns = []pipelineRun{fakeSummary("sink fs", 0.38), fakeSummary("sink fs", 0.40), fakeSummary("", 0.39)}
	compress := fakeRace("compress zstd -3, 2 workers", label, size,
		fakeContender("pipe", 0, []int{3370, 3400, 3390}, []int{6500, 6550, 6600}, 60<<20),
		fakeContender("zstd -3 -T2", 1.0, []int{3700, 3690, 3710}, []int{6900, 6950, 6920}, 40<<20),
		fakeContender("zstd -3 -T2 + sync -d", 1.0, []int{4000, 4050, 4020}, []int{6900, 6950, 6920}, 40<<20))
	compress.pipeRuns = []pipelineRun{fakeSummary("compress", 3.3), fakeSummary("compress", 3.35), fakeSummary("compress", 3.36)}
	compress.notes = []string{"Compressed size: pipe 214 MB (2.80×), zstd -3 213 MB (2.82×)."}
	plugin := fakeRace("plugin boundary: fs → fs copy", label, size,
		fakeContender("pipe (plugin)", 0, []int{500}, []int{400}, 0),
		fakeContender("pipe, endpoints in-process", 0.9, []int{390}, []int{350}, 0))
	verify := fakeRace("verify --decrypt of a zstd run (decoded to nowhere)", "a run of it: one zstd -3 .zst object (214 MB → 600 MB)", size,
		fakeContender("pipe verify --decrypt", 0, []int{1100, 1200}, []int{2000, 2100}, 0),
		fakeContender("zstd -d", 1.6, []int{1700, 1750}, []int{1600, 1650}, 0))
	verify.notes = []string{"pipe reads the object, checks its SHA-256 and decodes its frames on 2 workers; zstd -d decodes on one and writes a file"}
	r.throughput = []*race{copyRace, compress, plugin, verify}
	r.startup = fakeRace("start-up: a one-byte fs → fs run", "", 1,
		&contender{label: "pipe (plugin)", times: repeat(69900*time.Microsecond, startupRuns)},
		&contender{label: "pipe, endpoints in-process", times: repeat(29*time.Millisecond, startupRuns)})

	// The sections, in the order their scenarios run.
	memory := &memoryResult{budget: 148 << 20, pipeline: "pipeline \"memory\" {\n  profile = \"balanced\"\n}\n", runs: []memRun{
		{input: 1 << 30, peak: 129 << 20, pss: 86 << 20, wall: ms(9500), summary: fakeSummary("compress", 9.4)},
		{input: 8 << 30, peak: 128 << 20, pss: 85 << 20, wall: ms(76000), summary: fakeSummary("compress", 75.9)},
	}}

	const obj = 2 << 30
	up := fakeRace("upload, one 2 GiB object", "", obj,
		fakeContender("pipe (64 MiB × 8)", 0, []int{9500, 9400}, []int{4000, 4100}, 0),
		fakeContender("mc cp", 0, []int{11400, 11500}, []int{3000, 3100}, 0),
		fakeContender("rclone copyto", 0, []int{16500, 16600}, []int{5000, 5100}, 0))
	mcSync := fakeContender("mc cp + sync -d", 1.0, []int{6800, 6900}, []int{2000, 2000}, 0)
	rcSync := fakeContender("rclone copyto + sync -d", 1.0, []int{5500, 5600}, []int{2500, 2500}, 0)
	down := fakeRace("download, one 2 GiB object", "", obj,
		fakeContender("pipe", 0, []int{4700, 4750}, []int{3000, 3000}, 0),
		fakeContender("mc cp", 0, []int{5200, 5150}, []int{2000, 2000}, 0),
		fakeContender("rclone copyto", 0, []int{6600, 6700}, []int{2500, 2500}, 0),
		fakeContender("pipe, endpoints in-process", 0, []int{4500, 4450}, []int{2800, 2800}, 0),
		mcSync, rcSync)
	r.add("s3", &s3Result{size: obj, upload: up, download: down, mcSync: mcSync, rcSync: rcSync,
		sweep: []sweepPoint{{8 << 20, 4, ms(14000)}, {8 << 20, 8, ms(12000)}, {8 << 20, 16, ms(12500)},
			{64 << 20, 4, ms(10000)}, {64 << 20, 8, ms(9400)}, {64 << 20, 16, ms(9800)}},
		best:      sweepPoint{64 << 20, 8, ms(9400)},
		downSweep: []sweepPoint{{8 << 20, 8, ms(5000)}, {16 << 20, 8, ms(4700)}, {64 << 20, 8, ms(4900)}},
		downBest:  sweepPoint{16 << 20, 8, ms(4700)},
		wal: fakeRace("a 16 MiB WAL segment, whole process", "", 16<<20,
			&contender{label: "pipe", times: repeat(ms(179), walRuns)},
			&contender{label: "pipe, endpoints in-process", times: repeat(ms(120), walRuns)},
			&contender{label: "mc cp", times: repeat(ms(167), walRuns)}),
		mcVersion: "github.com/minio/mc (devel)", rcVersion: "github.com/rclone/rclone v1.68.2"})

	const db = 1444 << 20
	pg := &pgResult{direct: true, cpus: 2, dbSize: db, rows: 8_000_000, indexes: 6, zstdVersion: "zstd v1.5.4",
		backup: fakeRace("backup of a 1444 MiB database to MinIO", "", db,
			fakeContender("pipe, jobs = 4", 0, []int{5560, 5600, 5500}, []int{4900, 4950, 4800}, 186<<20),
			fakeContender("pg_dump | zstd | mc pipe", 0, []int{6380, 6400, 6350}, []int{4900, 4900, 4900}, 140<<20),
			fakeContender("pipe, custom format", 0, []int{6060, 6100, 6000}, []int{4500, 4500, 4500}, 173<<20),
			fakeContender(turboLabel, 0, []int{6210, 6200, 6250}, []int{3800, 3800, 3800}, 170<<20)),
		restore: fakeRace("restore of the 1444 MiB database from MinIO", "", db,
			fakeContender("pipe, jobs = 4", 0, []int{15510, 15600, 15400}, []int{1800, 1800, 1800}, 157<<20),
			fakeContender("mc cat | zstd -d | pg_restore", 0, []int{19230, 19300, 19100}, []int{2300, 2300, 2300}, 32<<20),
			fakeContender("pipe, custom format", 0, []int{19780, 19800, 19700}, []int{2300, 2300, 2300}, 150<<20)),
	}

	catalog := &catalogResult{runs: 1000, coldList: ms(4321), verifySize: obj,
		list: fakeRace("list 1000 runs (3001 objects)", "", 0,
			fakeContender("pipe backups", 0, []int{120, 125}, []int{50, 50}, 0),
			fakeContender("mc ls --recursive", 1/1.5, []int{200, 210}, []int{80, 80}, 0)),
		verify: fakeRace("verify a run of one 2 GiB object", "pg_dump text, stored as is", obj,
			fakeContender("pipe verify", 0, []int{5000, 5100}, []int{3000, 3000}, 0),
			fakeContender("mc cat | sha256sum", 1, []int{6000, 6100}, []int{4000, 4000}, 0)),
	}

	dbs := []string{"big", "crm"}
	pgCluster := &pgClusterResult{direct: false, cpus: 2, dbs: dbs, sizes: map[string]int64{"big": 582 << 20, "crm": 46 << 20}, total: 628 << 20,
		backup: fakeRace("backup of 2 databases (628 MiB) to MinIO", "", 628<<20,
			fakeContender(clusterPipeLabel, 0, []int{4000, 4100}, []int{3000, 3000}, 0),
			fakeContender("for db: pg_dump | zstd | mc pipe", 0, []int{5500, 5600}, []int{3500, 3500}, 0),
			fakeContender(clusterJobsLabel, 0, []int{3900, 3950}, []int{3100, 3100}, 0)),
		restore: fakeRace("restore of the 2 databases from MinIO", "", 628<<20,
			fakeContender(clusterPipeLabel, 0, []int{9000, 9100}, []int{1500, 1500}, 0),
			fakeContender("for db: createdb; mc cat | zstd -d | pg_restore", 0, []int{12000, 12100}, []int{1700, 1700}, 0),
			fakeContender(clusterJobsLabel, 0, []int{8000, 8100}, []int{1600, 1600}, 0)),
	}
	mysqlCluster := &mysqlClusterResult{direct: true, cpus: 2, dbs: dbs, total: 700 << 20,
		backup: fakeRace("backup of 2 MariaDB databases (700 MiB) to MinIO", "", 700<<20,
			fakeContender(clusterPipeLabel, 0, []int{7000, 7100}, []int{5000, 5000}, 0),
			fakeContender("for db: mariadb-dump | zstd | mc pipe", 0, []int{9500, 9600}, []int{5500, 5500}, 0)),
		restore: fakeRace("restore of the 2 MariaDB databases from MinIO", "", 700<<20,
			fakeContender(clusterPipeLabel, 0, []int{20000, 20100}, []int{3000, 3000}, 0),
			fakeContender("for db: mc cat | zstd -d | mariadb", 0, []int{27000, 27100}, []int{3200, 3200}, 0)),
	}

	const seg = 16 << 20
	burst := fakeRace("a burst of 32 segments (512 MiB of WAL), until all are archived", "", 32*seg,
		fakeContender("pipe-wal (async, 4 workers, background pusher)", 0, []int{3000, 3100}, []int{900, 950}, 30<<20),
		fakeContender("pgBackRest (async, process-max 2)", 1.2, []int{4000, 4100}, []int{2000, 2000}, 20<<20),
		fakeContender("barman-cloud-wal-archive", 1.2, []int{60000, 61000}, []int{30000, 30000}, 60<<20),
		fakeContender("pipe-wal (async, 4 workers, in archive_command)", 0, []int{3800, 3900}, []int{1200, 1200}, 35<<20))
	burst.notes = []string{"the harness plays PostgreSQL's archiver"}
	fetch := fakeRace("fetch 32 segments in order, as restore_command during recovery", "", 32*seg,
		fakeContender("pipe (prefetch 8, background prefetcher)", 0, []int{1500, 1600}, []int{700, 700}, 0),
		fakeContender("pgBackRest (async archive-get)", 1.2, []int{2700, 2800}, []int{1500, 1500}, 0),
		fakeContender("barman-cloud-wal-restore", 1.2, []int{30000, 31000}, []int{20000, 20000}, 0),
		fakeContender("pipe (prefetch 8, in restore_command)", 0, []int{1700, 1800}, []int{800, 800}, 0),
		fakeContender("pgBackRest (async archive-get, queue 1 GiB)", 1.2, []int{1900, 2000}, []int{1400, 1400}, 0))
	fetch.notes = []string{"the harness plays recovery"}
	wal := &walResult{segments: 32, segSize: seg, budget: 64 << 20, pgbackrestWorkers: 2,
		versions:   []string{"pgBackRest 2.54", "barman-cloud-wal-archive 3.12", "postgres (PostgreSQL) 15.10"},
		compressed: map[string]int64{"pipe": 100 << 20, "pgbackrest": 101 << 20, "barman": 150 << 20},
		single: fakeRace("push one 16 MiB segment, sync (whole process)", "", seg,
			fakeContender("pipe wal push", 0, []int{110, 115, 112}, []int{90, 90, 90}, 30<<20),
			fakeContender("pgbackrest archive-push", 1, []int{130, 128, 131}, []int{100, 100, 100}, 10<<20),
			fakeContender("barman-cloud-wal-archive", 0, []int{1800, 1900, 1850}, []int{900, 900, 900}, 50<<20)),
		burst: burst, fetch: fetch,
		phases: []walPhase{
			{scenario: "burst", tool: "pipe", rep: 1, m: measurement{wall: ms(3000), cpu: ms(900), maxRSS: 10 << 20},
				mon: monitorTotals{detachedCPU: ms(2500), minioCPU: ms(1000), busy: ms(5000), toolPeakRSS: 48 << 20, toolPeakPSS: 44 << 20, detachedPeakRSS: 40 << 20}},
			{scenario: "burst", tool: "pipe", rep: 2, m: measurement{wall: ms(3100), cpu: ms(950), maxRSS: 11 << 20},
				mon: monitorTotals{detachedCPU: ms(2600), minioCPU: ms(1100), busy: ms(5200), toolPeakRSS: 50 << 20, toolPeakPSS: 45 << 20, detachedPeakRSS: 42 << 20}},
			{scenario: "burst", tool: "pgbackrest", rep: 1, m: measurement{wall: ms(4000), cpu: ms(2000), maxRSS: 20 << 20},
				mon: monitorTotals{detachedCPU: ms(3000), minioCPU: ms(1200), busy: ms(7000), toolPeakRSS: 52 << 20, toolPeakPSS: 40 << 20, detachedPeakRSS: 25 << 20}},
			{scenario: "fetch", tool: "pipe", rep: 1, m: measurement{wall: ms(1500), cpu: ms(700), maxRSS: 12 << 20},
				mon: monitorTotals{detachedCPU: ms(1000), minioCPU: ms(500), busy: ms(2500), toolPeakRSS: 57 << 20, toolPeakPSS: 50 << 20, detachedPeakRSS: 45 << 20}},
			{scenario: "fetch", tool: "pipe-incommand", rep: 1, m: measurement{wall: ms(1700), cpu: ms(800), maxRSS: 13 << 20, long: 2, longWall: ms(900)},
				mon: monitorTotals{minioCPU: ms(600), busy: ms(2600)}},
			{scenario: "fetch", tool: "pgbackrest-deep", rep: 1, m: measurement{wall: ms(1900), cpu: ms(1400), maxRSS: 9 << 20},
				mon: monitorTotals{detachedCPU: ms(1300), minioCPU: ms(500), busy: ms(3300), toolPeakRSS: 60 << 20, toolPeakPSS: 30 << 20, detachedPeakRSS: 50 << 20}},
		},
	}

	const cluster = 1380 << 20
	base := &baseResult{scale: 90, segments: 32, clusterSize: cluster, dbSize: 1350 << 20, walBytes: 512 << 20,
		versions: []string{"pgBackRest 2.54", "barman-cloud-wal-archive 3.12"},
		backup: fakeRace("full base backup of the server (1380 MiB) to MinIO", "", cluster,
			fakeContender("pipe", 0, []int{8000, 8200}, []int{7000, 7100}, 0),
			fakeContender("pgBackRest", 0, []int{12000, 12500}, []int{9000, 9100}, 0),
			fakeContender("barman-cloud", 0, []int{160000, 170000}, []int{60000, 61000}, 0)),
		restore: fakeRace("restore the newest backup and recover 32 segments to the end of the archive", "", cluster,
			fakeContender("pipe", 0, []int{20000, 21000}, []int{9000, 9100}, 0),
			fakeContender("pgBackRest", 0, []int{27000, 27500}, []int{9500, 9600}, 0),
			fakeContender("barman-cloud", 0, []int{170000, 180000}, []int{50000, 51000}, 0)),
		stored:   map[string]int64{"pipe": 300 << 20, "pgbackrest": 310 << 20, "barman": 400 << 20},
		replayed: map[string]int64{"pipe": 520 << 20, "pgbackrest": 521 << 20, "barman": 530 << 20},
		pipeRuns: map[string][]pipelineRun{"backup": {fakeSummary("sink s3", 7.9)}, "restore": {fakeSummary("decompress", 5.0), fakeSummary("sink postgres_basebackup", 5.1)}},
		rss:      map[string]map[string]int64{"backup": {"pipe": 150 << 20, "pgbackrest": 50 << 20, "barman": 90 << 20}, "restore": {"pipe": 140 << 20, "pgbackrest": 40 << 20, "barman": 80 << 20}},
		notes:    []string{"a note on the base backups"},
		phases: []basePhase{
			{phase: "backup", tool: "pipe", rep: 1, wall: ms(8000), cmdCPU: ms(7000),
				mon: monitorTotals{pgCPU: ms(3000), minioCPU: ms(2000), archiveCPU: ms(500), busy: ms(15000), iowait: ms(300), diskRead: 1 << 30, diskWrite: 2 << 30, others: "dockerd 0.4 s"}},
			{phase: "restore", tool: "pgbackrest", rep: 2, wall: ms(27500), cmdCPU: ms(6000), cmdWall: ms(9000), rcCPU: ms(3000), rcWall: ms(12000), rcCalls: 33,
				redoCPU: ms(4000), redoElapsed: ms(15000),
				mon: monitorTotals{pgCPU: ms(5000), originCPU: ms(200), minioCPU: ms(1500), detachedCPU: ms(600), busy: ms(30000), iowait: ms(1000), diskRead: 3 << 30, diskWrite: 4 << 30}},
		},
	}
	r.add("catalog", catalog)
	r.add("postgres", pg)
	r.add("pgcluster", pgCluster)
	r.add("mysqlcluster", mysqlCluster)
	r.add("mariaphysical", &mariaPhysicalResult{cpus: 2, rows: 6_000_000, size: 1500 << 20, version: "10.11.19-MariaDB-0+deb12u1-log",
		backup: fakeRace("MariaDB: physical backup", "", 1500<<20,
			fakeContender("pipe mariadb_backup", 0, []int{9000, 9100}, []int{100, 100}, 0),
			fakeContender("pipe mysql (logical)", 0.6, []int{30000, 31000}, []int{100, 100}, 0),
			fakeContender("mariadb-backup → zstd → mc", 0.9, []int{10000, 10500}, []int{100, 100}, 0)),
		restore: fakeRace("MariaDB: restore", "", 1500<<20,
			fakeContender("pipe mariadb_backup (prepared)", 0, []int{12000, 12100}, []int{100, 100}, 0),
			fakeContender("pipe mysql (logical)", 0.35, []int{90000, 91000}, []int{100, 100}, 0)),
		incremental: fakeRace("MariaDB: incremental after 2% changed", "", 1500<<20,
			fakeContender("pipe mariadb_backup incremental", 0, []int{3000, 3100}, []int{100, 100}, 0),
			fakeContender("pipe mariadb_backup full", 0.3, []int{9000, 9100}, []int{100, 100}, 0)),
		stored: map[string][]int64{"incremental": {60 << 20, 61 << 20}, "full again": {700 << 20, 700 << 20}, "full": {700 << 20}, "logical": {500 << 20}},
		lag:    []time.Duration{300 * time.Millisecond, 800 * time.Millisecond, 1400 * time.Millisecond}, writes: 400})
	r.add("wal", wal)
	r.add("basebackup", base)
	incr := &incrResult{scale: 100, clusterSize: 1500 << 20, versions: []string{"postgres (PostgreSQL) 17.6", "pgBackRest 2.55.1"},
		full: fakeRace("full base backup", "", 1500<<20,
			fakeContender("pipe", 0, []int{10000}, []int{9000}, 0),
			fakeContender(incrTools[1], 0, []int{14000}, []int{9000}, 0),
			fakeContender(incrTools[2], 0, []int{12000}, []int{9000}, 0)),
		incr: fakeRace("incremental base backup", "", 1500<<20,
			fakeContender("pipe", 0, []int{1500, 1600}, []int{900, 950}, 0),
			fakeContender(incrTools[1], 0, []int{3000, 3100}, []int{900, 950}, 0),
			fakeContender(incrTools[2], 0, []int{4000, 4100}, []int{900, 950}, 0)),
		restore: fakeRace("restore of the newest chain", "", 1500<<20,
			fakeContender("pipe, full + 2 (composed)", 0, []int{11000}, []int{9000}, 0),
			fakeContender("pipe, the full alone", 0, []int{10000}, []int{9000}, 0),
			fakeContender("pg_combinebackup", 0, []int{20000}, []int{9000}, 0)),
		stored:       map[string][]int64{"pipe": {200 << 20, 9 << 20, 9 << 20}, incrTools[1]: {210 << 20, 10 << 20, 10 << 20}, incrTools[2]: {190 << 20, 8 << 20, 8 << 20}},
		pipePeak:     map[string]int64{"incremental": 90 << 20},
		pipeBudget:   map[string]int64{"incremental": 180 << 20},
		restoreDisk:  map[string]int64{"chain": 1500 << 20, "pgc": 3000 << 20, "pgc-out": 1500 << 20},
		combineAlone: []time.Duration{ms(6000)},
		pipeRuns:     map[string][]pipelineRun{"incremental": {fakeSummary("source", 1.5)}},
		notes:        []string{"a note on incrementals"},
	}
	r.add("incremental", incr)
	dd := &dedupResult{scale: 100, versions: []string{"restic 0.14.0", "pg_dump (PostgreSQL) 15.18"}, variants: []*dedupVariant{{
		name: "2% in one key range", nights: 3, dumpSize: 1300 << 20,
		backup: fakeRace("backup of one night's dump", "", 1300<<20,
			fakeContender(dedupTools[0], 0, []int{6000, 2000, 2100}, []int{9000, 3000, 3000}, 0),
			fakeContender(dedupTools[1], 0, []int{5000, 5000, 5100}, []int{9000, 9000, 9000}, 0),
			fakeContender(dedupTools[2], 0, []int{15000, 6000, 6000}, []int{20000, 8000, 8000}, 0),
			fakeContender(dedupTools[3], 0, []int{25000, 9000, 9000}, []int{30000, 12000, 12000}, 0)),
		restore: fakeRace("restore of the newest night", "", 1300<<20,
			fakeContender(dedupTools[0], 0, []int{4000}, []int{6000}, 0),
			fakeContender("restic dump, then sync", 0, []int{9000}, []int{9000}, 0),
			fakeContender("pipe, no dedup", 0, []int{3800}, []int{6000}, 0)),
		stored: map[string][]int64{dedupTools[0]: {200 << 20, 215 << 20, 230 << 20}, dedupTools[1]: {200 << 20, 400 << 20, 600 << 20},
			dedupTools[2]: {230 << 20, 330 << 20, 430 << 20}, dedupTools[3]: {210 << 20, 300 << 20, 390 << 20}},
		budget: 300 << 20, peak: 120 << 20, runs: []pipelineRun{fakeSummary("dedup", 1.3)},
	}}}
	r.add("dedup", dd)
	r.add("dedupbase", &dedupBaseResult{scale: 100, version: "PostgreSQL 15.18", series: []*dedupBase{{
		name: "2% of pgbench_accounts' rows updated a night in one key range", nights: 3, clusterSize: 1525 << 20, changed: 0.042,
		backup: fakeRace("base backup of the cluster", "", 1525<<20,
			fakeContender(dedupBaseTools[0], 0, []int{11000, 10000, 10500}, []int{12000, 11000, 11000}, 0),
			fakeContender(dedupBaseTools[1], 0, []int{9000, 9500, 9400}, []int{10000, 10000, 10000}, 0)),
		restore: fakeRace("restore of the newest base backup", "", 1525<<20,
			fakeContender(dedupBaseTools[0], 0, []int{5000}, []int{7000}, 0),
			fakeContender(dedupBaseTools[1], 0, []int{4800}, []int{6500}, 0)),
		stored: map[string][]int64{dedupBaseTools[0]: {70 << 20, 75 << 20, 80 << 20}, dedupBaseTools[1]: {67 << 20, 134 << 20, 201 << 20}},
		budget: 280 << 20, peak: 100 << 20, runs: []pipelineRun{fakeSummary("source", 1.1)},
	}}})
	r.add("memory", memory)
	return r
}

// repeat is n runs of d each.
func repeat(d time.Duration, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// sectionOf is the report's section of the named scenario.
func sectionOf[S section](t *testing.T, r *report, name string) S {
	t.Helper()
	i := slices.IndexFunc(r.sections, func(s namedSection) bool { return s.name == name })
	if i < 0 {
		t.Fatalf("no section %s", name)
	}
	return r.sections[i].section.(S)
}

// TestReportGolden renders a report of every scenario from fake results:
// the whole text is testdata/report.golden.md (go test ./bench -update
// rewrites it after a change meant to change the report).
func TestReportGolden(t *testing.T) {
	got := fakeReport().markdown()
	golden := filepath.Join("testdata", "report.golden.md")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (go test ./bench -update writes it)", err)
	}
	if got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			g, w := "", ""
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("the report differs from %s at line %d:\ngot  %q\nwant %q", golden, i+1, g, w)
			}
		}
	}
}

// TestReportRows checks rows of each section against numbers worked out
// by hand from fakeReport's medians.
func TestReportRows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		edit   func(r *report)
		want   []string
		absent string // a text the report must not hold
	}{
		{name: "header, full mode", want: []string{
			"- mode: full; 3 runs of each tool per scenario, interleaved",
			"Reproduce: `go run ./bench -pipe ./bin/pipe -reps 3` (after `make build`; `make bench` does both)",
		}},
		{name: "header, quick mode", edit: func(r *report) { r.cfg.quick = true }, want: []string{
			"- mode: quick (-quick: small sizes, not for comparison); 3 runs of each tool per scenario, interleaved",
		}},
		// 600 MB in 0.410 s (pipe) and 0.325 s (cp): 1463 and 1846 MB/s,
		// 0.325 / 0.410 = 0.79, under 0.90.
		{name: "throughput, a target missed", want: []string{
			"| fs → fs copy, no stages | pg_dump text, 600 MB | 1463 MB/s | cp: 1846 MB/s | 0.79× | ≥ 0.90× | **no** |",
			"| fs → fs copy, no stages | pg_dump text, 600 MB | 1463 MB/s | cp + sync -d: 1000 MB/s | 1.46× | ≥ 0.90× | yes |",
		}},
		{name: "run summary: bottlenecks counted, the median run's stages", want: []string{
			"| fs → fs copy, no stages | sink fs (2/3), (none) (1/3) | source 6% (0.00s / 3.00s); compress ×2 99% (0.02s / 3.29s); sink fs 5% (3.15s / 0.00s); run 0.39s |",
		}},
		{name: "start-up over its goal", edit: func(r *report) { r.startup.pipe.times = repeat(80*time.Millisecond, startupRuns) }, want: []string{
			"the plugin process adds 51ms (goal: under 50 ms for a run with two plugins; the fs source and sink share one process). **no**",
		}},
		{name: "no start-up line unless measured", edit: func(r *report) { r.startup = nil }, absent: "Start-up:"},
		// 129 and 128 MiB peaks: 128 / 129 = 0.99.
		{name: "memory", want: []string{
			"| 8 GiB | 128 MiB | 85 MiB | 76.0 s | 113 MB/s | compress |",
			"| peak 8 GiB / peak 1 GiB | 0.99 | ≤ 1.10 | yes |",
			"| peak / budget, 1 GiB input | 0.87 | ≤ 1.00 | yes |",
		}},
		// 2 GiB in 9.45 s (pipe), 11.45 s (mc), 16.55 s (rclone).
		{name: "object storage", want: []string{
			"| upload, one 2 GiB object | 227 MB/s | 188 MB/s | 130 MB/s | 1.21× | ≥ 1.00× | yes |",
			"| a 16 MiB WAL segment, whole process (median of 11) | 179ms | 167ms | | 1.07× of mc's wall time | ≤ 1.20× | yes |",
			"| 64 MiB | 215 MB/s | 228 MB/s | 219 MB/s |",
		}},
		// Backup: shell 6.38 s, custom 6.06 s (0.95), jobs 5.56 s (0.87),
		// turbo 6.21 s (0.97): the fastest misses 0.80.
		{name: "postgres", want: []string{
			"| backup | 6.38s | 6.06s | 5.56s | 0.95× | 0.87× | 1.00× custom, 0.80× fastest | yes, **no** |",
			"Backup in pipe's fastest mode, pipe, turbo profile, custom format (zstd level 1, so larger objects than level 3's): 6.21s, 0.97× the shell pipeline.",
			"| backup, pg_dump \\| zstd \\| mc pipe | 140 MiB |",
		}},
		{name: "postgres without a turbo run", edit: func(r *report) { pg := sectionOf[*pgResult](t, r, "postgres"); pg.backup.refs = pg.backup.refs[:2] }, want: []string{
			"| backup | 6.38s | 6.06s | 5.56s | 0.95× | 0.87× | 1.00× custom, 0.80× fastest | yes, **no** |",
		}},
		{name: "catalog", want: []string{
			"| list 1000 runs (`pipe backups FILE --json`, through the store's index) | 0.122 s | `mc ls --recursive` 0.205 s | 0.60× | ≤ 1.5× | yes |",
		}},
		// The loop 5.55 s, pipe 4.05 s: 0.73.
		{name: "a whole server", want: []string{
			"| backup | 5.55s | 4.05s | 0.73× | ≤ 0.80× | yes |",
			"| restore, table by table (jobs = 2) | 12.05s | 8.05s | 0.67× | ≤ 0.80× | yes |",
			"| restore | 27.05s | 20.05s | 0.74× | ≤ 0.80× | yes |",
		}},
		// One segment: pgBackRest 0.130 s / pipe 0.112 s = 1.16.
		{name: "wal", want: []string{
			"| push one segment, sync, whole process | 0.112 s | 0.130 s | 1.850 s | 1.16× as fast | ≥ 1.0× pgBackRest (≤ its time) | yes |",
			"| burst | pipe, background | 2 | 3.05 s | 0, 0.00 s | 0.9 s | 2.5 s | 1.1 s | 5.1 s | 50 MiB | 42 MiB |",
			"| fetch | pipe, in the command | 1 | 1.70 s | 2, 0.90 s | 0.8 s | 0.0 s | 0.6 s | 2.6 s | 0 MiB | 0 MiB |",
			"| burst, background pusher | 50 MiB | 52 MiB | 0.96× | ≤ 1.00× | yes | 45 MiB | 40 MiB |",
			"the budget `pipe plan` prints for any one pipe process of the archive, 64 MiB: 1.42× its peak (target: at least 1×, at most 1.5×): yes.",
		}},
		// pipe 8.1 s against pgBackRest's 12.25 s: 0.66.
		{name: "base backup", want: []string{
			"| base backup, wall | 8.1 s | 12.2 s | 165.0 s | 0.66× | ≤ 0.80× | yes |",
			"| stored backup | 300 MiB | 310 MiB | 400 MiB | | | |",
		}},
		{name: "every run", want: []string{
			"- fs → fs copy, no stages: pipe 0.400, cp 0.320, cp + sync -d 0.590, pipe 0.420, cp 0.330, cp + sync -d 0.600, pipe 0.410, cp 0.325, cp + sync -d 0.610",
			"  - cp: wall min 0.320, median 0.325, max 0.330; CPU (user+sys) median 0.20 s",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fakeReport()
			if tc.edit != nil {
				tc.edit(r)
			}
			text := r.markdown()
			for _, w := range tc.want {
				if !strings.Contains(text, w) {
					t.Errorf("the report has no line\n%s", w)
				}
			}
			if tc.absent != "" && strings.Contains(text, tc.absent) {
				t.Errorf("the report holds %q", tc.absent)
			}
		})
	}
}
