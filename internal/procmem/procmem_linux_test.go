//go:build linux

package procmem

import (
	"os"
	"os/exec"
	"slices"
	"testing"
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
