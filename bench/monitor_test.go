package main

import (
	"os"
	"testing"
	"time"

	"github.com/pipebackup/pipe/internal/procmem"
)

func TestLargest(t *testing.T) {
	for _, tc := range []struct {
		name string
		cpu  map[string]time.Duration
		want string
	}{
		{"none", nil, ""},
		{"under 0.1 s is left out", map[string]time.Duration{"sshd": 99 * time.Millisecond}, ""},
		{"the three largest, largest first", map[string]time.Duration{"a": time.Second, "b": 3 * time.Second, "c": 2 * time.Second, "d": 1500 * time.Millisecond},
			"b 3.0 s, c 2.0 s, d 1.5 s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := largest(tc.cpu); got != tc.want {
				t.Errorf("largest = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestTreeRSS sums this process alone: its children (none) run nothing.
func TestTreeRSS(t *testing.T) {
	self := os.Getpid()
	rss, pss := treeRSS(self, procmem.Exe(self), true)
	want, ok := procmem.Field(self, "status", "VmRSS:")
	if !ok {
		t.Skip("no /proc here")
	}
	if rss <= 0 || rss > 2*want || pss < 0 {
		t.Errorf("treeRSS(self) = %d RSS, %d PSS; VmRSS says %d", rss, pss, want)
	}
	if _, pss := treeRSS(self, procmem.Exe(self), false); pss != 0 {
		t.Errorf("treeRSS without PSS read %d of it", pss)
	}
}
