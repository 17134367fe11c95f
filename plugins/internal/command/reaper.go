package command

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The reaper ends every program's process group when the process that
// started them dies, whatever kills it. A program's own process is killed
// by the kernel then (Pdeathsig), but not what it started: `sh -c "…;
// sleep 37"` would leave sleep running, holding the output pipe pipe reads.
// So the first program a process starts also starts a reaper: this same
// executable, told by its argv[0] to watch instead. The starting process
// writes each program's process group to the reaper's stdin; when that
// pipe closes (the process died: the kernel closes its descriptors) or the
// reaper gets SIGTERM (its Pdeathsig), it kills every group it was told
// of, and exits.

// reaperArg0 is the argv[0] that turns this executable into the reaper.
const reaperArg0 = "pipe-command-reaper"

func init() {
	if len(os.Args) == 1 && os.Args[0] == reaperArg0 {
		os.Exit(reap(os.Stdin, os.Stdout))
	}
}

// reap watches r for "+PGID" and "-PGID" lines until it ends or SIGTERM
// comes, then kills the groups still listed and, when its parent led a
// session of its own (a plugin process: pipe starts each in a new
// session), every process of that session: a program that had started
// before its group reached the reaper is one of them.
func reap(r, ready *os.File) int {
	signal.Ignore(syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT)
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	parent := os.Getppid()
	session := 0
	if sid, err := unix.Getsid(parent); err == nil && sid == parent {
		session = sid
	}
	// The starting process waits for this before it runs any program.
	_, _ = ready.Write([]byte("ready\n")) // a parent that cannot read it gives up on us
	ready.Close()
	lines := make(chan string)
	go func() {
		s := bufio.NewScanner(r)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	groups := map[int]bool{}
	var deadline <-chan time.Time // set once SIGTERM came
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				killGroups(groups)
				killSession(session)
				return 0
			}
			if len(line) < 2 {
				continue
			}
			pgid, err := strconv.Atoi(line[1:])
			if err != nil || pgid <= 1 {
				continue
			}
			groups[pgid] = line[0] == '+'
		case <-term:
			// The parent died (or someone asks): what it wrote last may
			// still wait in the pipe, which then ends. Read it first.
			deadline = time.After(time.Second)
			term = nil
		case <-deadline:
			killGroups(groups)
			killSession(session)
			return 0
		}
	}
}

func killGroups(groups map[int]bool) {
	for pgid, live := range groups {
		if live {
			_ = syscall.Kill(-pgid, syscall.SIGKILL) // ESRCH: already gone
		}
	}
}

// killSession kills every process of session sid but this one, a few
// times over (one may fork while the others die); 0 does nothing.
func killSession(sid int) {
	if sid <= 1 {
		return
	}
	self := os.Getpid()
	for range 3 {
		entries, err := os.ReadDir("/proc")
		if err != nil {
			return
		}
		found := false
		for _, e := range entries {
			pid, err := strconv.Atoi(e.Name())
			if err != nil || pid == self {
				continue
			}
			if s, err := unix.Getsid(pid); err == nil && s == sid {
				_ = syscall.Kill(pid, syscall.SIGKILL) // ESRCH: already gone
				found = true
			}
		}
		if !found {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// reaper is this process's connection to its reaper.
var reaper struct {
	once sync.Once
	mu   sync.Mutex
	w    *os.File // nil when the reaper could not start
}

// watch tells the reaper about a program's process group (started: true)
// or that it ended.
func watch(pgid int, started bool) {
	startReaper()
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	if reaper.w == nil {
		return
	}
	sign := "-"
	if started {
		sign = "+"
	}
	if _, err := fmt.Fprintf(reaper.w, "%s%d\n", sign, pgid); err != nil {
		reaper.w.Close()
		reaper.w = nil
	}
}

// startReaper starts this process's reaper, once.
func startReaper() { reaper.once.Do(spawnReaper) }

func spawnReaper() {
	pr, pw, err := os.Pipe()
	if err != nil {
		return
	}
	defer pr.Close()
	rr, rw, err := os.Pipe()
	if err != nil {
		pw.Close()
		return
	}
	defer rr.Close()
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{reaperArg0}
	cmd.Env = []string{}
	cmd.Stdin, cmd.Stdout = pr, rw
	// Its own group: a terminal's Ctrl-C is not for it. Pdeathsig: it
	// also learns of its parent's death by signal.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	err = cmd.Start()
	rw.Close()
	if err != nil {
		pw.Close()
		return
	}
	go func() { _ = cmd.Wait() }() // it lives as long as this process; collect it if it ends
	// Wait until it watches: a reaper still starting up would die of the
	// signal meant to wake it.
	_ = rr.SetReadDeadline(time.Now().Add(10 * time.Second)) // without a deadline, the read just has none
	if _, err := bufio.NewReader(rr).ReadString('\n'); err != nil {
		_ = cmd.Process.Kill()
		pw.Close()
		return
	}
	reaper.w = pw
}
