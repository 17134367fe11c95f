//go:build linux

package procmem

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestChildrenAndFields(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sleep to start: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if kids := Children()[os.Getpid()]; !slices.Contains(kids, cmd.Process.Pid) {
		t.Errorf("children of this test %v, want %d among them", kids, cmd.Process.Pid)
	}
	rss, ok := Field(os.Getpid(), "status", "VmRSS:")
	if !ok || rss <= 0 {
		t.Fatalf("VmRSS %d, %v", rss, ok)
	}
	ResetPeak(os.Getpid())
	if hwm, ok := Field(os.Getpid(), "status", "VmHWM:"); !ok || hwm < rss/2 {
		t.Errorf("VmHWM %d after a reset, RSS was %d", hwm, rss)
	}
	if _, ok := Field(os.Getpid(), "status", "NoSuchField:"); ok {
		t.Error("a missing field was found")
	}
}

// TestTreeAndProcess follows a shell and the sleep it waits for: the
// grandchild is in the test's tree, and each reader names its process.
func TestTreeAndProcess(t *testing.T) {
	cmd := exec.Command("sh", "-c", "sleep 10 & wait")
	if err := cmd.Start(); err != nil {
		t.Skipf("no sh to start: %v", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var sleeper int
	for deadline := time.Now().Add(5 * time.Second); sleeper == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if kids := Children()[cmd.Process.Pid]; len(kids) > 0 {
			sleeper = kids[0]
		}
	}
	if sleeper == 0 {
		t.Fatal("the shell started no child in 5 s")
	}
	tree := Tree(os.Getpid())
	if tree[0] != os.Getpid() || !slices.Contains(tree, cmd.Process.Pid) || !slices.Contains(tree, sleeper) {
		t.Errorf("Tree(self) = %v, want this process first, then %d and %d", tree, cmd.Process.Pid, sleeper)
	}
	if i, j := slices.Index(tree, cmd.Process.Pid), slices.Index(tree, sleeper); i > j {
		t.Errorf("Tree(self) = %v lists the shell after its child", tree)
	}
	st, ok := ReadStat(sleeper)
	if !ok || st.PPid != cmd.Process.Pid || st.Comm != "sleep" || st.RSS <= 0 || st.Start <= 0 {
		t.Errorf("ReadStat(sleep) = %+v, %v; want its parent %d, comm sleep, some RSS and a start", st, ok, cmd.Process.Pid)
	}
	if c := Cmdline(sleeper); !strings.HasPrefix(c, "sleep 10") {
		t.Errorf("Cmdline(sleep) = %q", c)
	}
	if uid, ok := Owner(sleeper); !ok || uid != os.Getuid() {
		t.Errorf("Owner(sleep) = %d, %v; want %d", uid, ok, os.Getuid())
	}
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	if exe := Exe(os.Getpid()); exe != self {
		t.Errorf("Exe(self) = %q, want %q", exe, self)
	}
	if _, ok := ReadStat(-1); ok {
		t.Error("ReadStat of no process succeeded")
	}
	if snap := Snapshot(); snap[os.Getpid()].PPid != os.Getppid() {
		t.Errorf("Snapshot()[self] = %+v, want the parent %d", snap[os.Getpid()], os.Getppid())
	}
}

func TestParseStat(t *testing.T) {
	// The fields after comm: state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime cutime cstime priority nice
	// threads itrealvalue starttime vsize rss …
	const tail = " S 42 1 1 0 -1 4194560 100 0 0 0 150 50 7 7 20 0 1 0 98765 1000000 300 18446744073709551615"
	for _, tc := range []struct {
		name string
		line string
		want Stat
		ok   bool
	}{
		{"plain", "1234 (pipe)" + tail, Stat{PPid: 42, Comm: "pipe", CPU: 2 * time.Second, RSS: 300 * 4096, Start: 98765}, true},
		{"comm with spaces and parentheses", "1234 (a) b (c d))" + tail, Stat{PPid: 42, Comm: "a) b (c d)", CPU: 2 * time.Second, RSS: 300 * 4096, Start: 98765}, true},
		{"no comm", "1234 pipe" + tail, Stat{}, false},
		{"cut short", "1234 (pipe) S 42 1 1", Stat{}, false},
		{"a parent that is no number", "1234 (pipe) S x" + tail[4:], Stat{}, false},
		{"empty", "", Stat{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := parseStat(tc.line, 4096)
			if ok != tc.ok || got != tc.want {
				t.Errorf("parseStat = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}
