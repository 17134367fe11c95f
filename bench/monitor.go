package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pipebackup/pipe/internal/procmem"
)

// The monitor of the WAL and base backup scenarios: every process on the
// machine, sampled from /proc every 100 ms during one measured run, told
// apart by whose it is (PostgreSQL's, MinIO's, the measured tool's, the
// archiving's, the rest), plus the machine's busy, iowait and disk
// counters. internal/procmem reads the processes; the machine's counters
// are read here.

// monitorTotals is what a monitor saw during one run.
type monitorTotals struct {
	pgCPU, minioCPU, archiveCPU time.Duration // sampled
	originCPU                   time.Duration // the backed-up server's, during restores
	detachedCPU                 time.Duration // the tool's detached helpers, sampled
	toolPeakRSS                 int64
	toolPeakPSS                 int64         // the same processes' PSS (shared pages divided among their sharers)
	detachedPeakRSS             int64         // of the detached helpers alone
	busy, iowait                time.Duration // the machine's, all CPUs
	diskRead, diskWrite         int64
	others                      string // the largest of the rest, by command name
}

// procInfo is one process the monitor has seen.
type procInfo struct {
	cat         string // pg, origin, minio, cmd, rc, tool, archive, other
	comm        string
	first, last time.Duration // CPU time (user + system) at the first and the last sample
	ppid        int
	start       int64 // the process's start time, against reused pids
}

// watched is what the monitor tells apart: PostgreSQL's processes (its
// binary), the tools' (they run as pgUID; pipe's binary, pgBackRest,
// barman-cloud), and the server of pgdata, whose archiver's children are
// archiving.
type watched struct {
	pgdata, pgBin, pipe string
	pgUID               int
}

// watched is what a monitor of this scenario tells apart.
func (w *walBench) watched() watched {
	wt := watched{pgdata: w.pgdata, pipe: w.b.cfg.pipe, pgUID: os.Getuid()}
	wt.pgBin, _ = lookPG("postgres")
	if p, err := filepath.EvalSymlinks(wt.pgBin); err == nil {
		wt.pgBin = p
	}
	if w.cred != nil {
		wt.pgUID = int(w.cred.Uid)
	}
	return wt
}

type monitor struct {
	wt    watched
	stopC chan struct{}
	done  sync.WaitGroup
	mu    sync.Mutex // procs, peak and detachedPeak, between scans and waitDetached
	procs map[int]*procInfo
	peak  int64
	pss   int64 // the largest sum of the tool's PSS
	// detachedPeak is the largest sum of the detached helpers' RSS.
	detachedPeak int64
	startCS      cpuStat
	startDS      [2]int64
	first        bool
	origin       int // the server's postmaster
	self         int // the harness
	// restoring counts the backed-up server apart (its idle processes
	// while another server recovers).
	restoring bool
}

type cpuStat struct{ busy, iowait int64 }

const clkTck = 100 // USER_HZ, the unit of /proc/stat

func startMonitor(wt watched, restoring bool) *monitor {
	m := &monitor{wt: wt, stopC: make(chan struct{}), procs: map[int]*procInfo{}, first: true, self: os.Getpid(), restoring: restoring}
	if b, err := os.ReadFile(filepath.Join(wt.pgdata, "postmaster.pid")); err == nil {
		m.origin, _ = strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	}
	m.startCS = readCPUStat()
	m.startDS = readDiskStats()
	m.scan()
	m.first = false
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-m.stopC:
				return
			case <-t.C:
				m.scan()
			}
		}
	}()
	return m
}

func (m *monitor) stop() monitorTotals {
	close(m.stopC)
	m.done.Wait()
	m.scan()
	var t monitorTotals
	others := map[string]time.Duration{}
	for _, p := range m.procs {
		d := p.last - p.first
		switch p.cat {
		case "pg":
			t.pgCPU += d
		case "origin":
			t.originCPU += d
		case "minio":
			t.minioCPU += d
		case "tool":
			t.detachedCPU += d
		case "archive":
			t.archiveCPU += d
		case "other":
			others[p.comm] += d
		}
	}
	t.others = largest(others)
	t.toolPeakRSS, t.toolPeakPSS, t.detachedPeakRSS = m.peak, m.pss, m.detachedPeak
	cs := readCPUStat()
	t.busy = time.Duration(cs.busy-m.startCS.busy) * time.Second / clkTck
	t.iowait = time.Duration(cs.iowait-m.startCS.iowait) * time.Second / clkTck
	// What the run left dirty is its writing too: flushed now, after
	// the clock stopped, so the disk counters hold it.
	syscall.Sync()
	ds := readDiskStats()
	t.diskRead, t.diskWrite = ds[0]-m.startDS[0], ds[1]-m.startDS[1]
	return t
}

// largest names the three commands that used the most CPU, those of at
// least 0.1 s: "name 1.2 s, …".
func largest(cpu map[string]time.Duration) string {
	names := make([]string, 0, len(cpu))
	for n := range cpu {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return cpu[names[i]] > cpu[names[j]] })
	var parts []string
	for _, n := range names[:min(3, len(names))] {
		if cpu[n] >= 100*time.Millisecond {
			parts = append(parts, fmt.Sprintf("%s %.1f s", n, cpu[n].Seconds()))
		}
	}
	return strings.Join(parts, ", ")
}

// scan samples every process once.
func (m *monitor) scan() {
	stats := procmem.Snapshot()
	m.mu.Lock()
	defer m.mu.Unlock()
	var toolRSS, toolPSS, detachedRSS int64
	for pid, st := range stats {
		p := m.procs[pid]
		if p == nil || p.start != st.Start {
			p = &procInfo{cat: m.classify(pid, st, stats), ppid: st.PPid, start: st.Start, comm: st.Comm}
			if m.first {
				p.first = st.CPU // running before the phase: count from here
			}
			m.procs[pid] = p
		} else if p.ppid != st.PPid && p.cat != "other" {
			// Detached since (a daemon's double fork): what is it now?
			p.cat, p.ppid = m.classify(pid, st, stats), st.PPid
		}
		p.last = st.CPU
		switch p.cat {
		case "cmd", "rc", "tool":
			toolRSS += st.RSS
			if n, ok := procmem.Field(pid, "smaps_rollup", "Pss:"); ok {
				toolPSS += n
			}
		}
		if p.cat == "tool" {
			detachedRSS += st.RSS
		}
	}
	m.peak, m.pss = max(m.peak, toolRSS), max(m.pss, toolPSS)
	m.detachedPeak = max(m.detachedPeak, detachedRSS)
}

// waitDetached waits, at most limit, until the tool's detached helpers
// seen so far (a background pusher or prefetcher, pgBackRest's async
// process) have exited, so that all their work is the run's. It reports
// whether they did.
func (m *monitor) waitDetached(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		alive := false
		m.mu.Lock()
		for pid, p := range m.procs {
			if p.cat != "tool" {
				continue
			}
			if st, ok := procmem.ReadStat(pid); ok && st.Start == p.start {
				alive = true
			}
		}
		m.mu.Unlock()
		if !alive {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// classify names a process's part: PostgreSQL's, MinIO's, the measured
// tool's (cmd: under the harness's command, timed exactly; rc: under
// restore_command's wrapper, timed exactly; tool: detached, sampled), or
// archiving's (a tool under the origin server's archiver or queued by
// archive.sh); other for the rest of the machine.
func (m *monitor) classify(pid int, st procmem.Stat, stats map[int]procmem.Stat) string {
	exe := procmem.Exe(pid)
	switch {
	case exe == m.wt.pgBin && m.restoring && (pid == m.origin || st.PPid == m.origin):
		return "origin"
	case exe == m.wt.pgBin:
		return "pg"
	case st.Comm == "minio":
		return "minio"
	}
	if uid, ok := procmem.Owner(pid); !ok || uid != m.wt.pgUID {
		return "other"
	}
	isTool := exe == m.wt.pipe || filepath.Base(exe) == "pgbackrest"
	if !isTool {
		isTool = strings.Contains(procmem.Cmdline(pid), "barman-cloud")
	}
	if !isTool {
		return "other"
	}
	return m.ancestry(st.PPid, stats)
}

// ancestry names a tool's process by its ancestors, from its parent a up:
// archive (under the origin server or archive.sh), cmd (under the
// harness), rc (under timed.sh), else tool (detached).
func (m *monitor) ancestry(a int, stats map[int]procmem.Stat) string {
	for seen := 0; a > 1 && seen < 64; seen++ {
		if a == m.origin {
			return "archive"
		}
		if a == m.self {
			return "cmd"
		}
		c := procmem.Cmdline(a)
		if strings.Contains(c, "bg-push.sh") || strings.Contains(c, "archive.sh") {
			return "archive"
		}
		if strings.Contains(c, "timed.sh") {
			return "rc"
		}
		as, ok := stats[a]
		if !ok {
			break
		}
		a = as.PPid
	}
	return "tool"
}

func readCPUStat() cpuStat {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuStat{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal
	var v [9]int64
	for i := 1; i < len(f) && i < 9; i++ {
		v[i], _ = strconv.ParseInt(f[i], 10, 64)
	}
	return cpuStat{busy: v[1] + v[2] + v[3] + v[6] + v[7] + v[8], iowait: v[5]}
}

// readDiskStats sums bytes read and written on the machine's disks (not
// partitions, loop or device-mapper devices).
func readDiskStats() [2]int64 {
	var out [2]int64
	b, err := os.ReadFile("/proc/diskstats")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 10 {
			continue
		}
		name := f[2]
		if _, err := os.Stat("/sys/block/" + name + "/device"); err != nil {
			continue
		}
		r, _ := strconv.ParseInt(f[5], 10, 64)
		w, _ := strconv.ParseInt(f[9], 10, 64)
		out[0] += r * 512
		out[1] += w * 512
	}
	return out
}
