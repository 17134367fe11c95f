package procmem

import (
	"slices"
	"time"
)

// Stat is what /proc/PID/stat says of a process.
type Stat struct {
	PPid int
	Comm string // the executable's name, at most 15 bytes
	// CPU is the user and system time the process has used so far (its
	// own, not its children's), in steps of 10 ms.
	CPU time.Duration
	RSS int64 // resident memory, bytes
	// Start is when the process started, in clock ticks after boot: a pid
	// and its Start name one process even after the pid is reused.
	Start int64
}

// childrenOf maps each pid of stats to its children's, in ascending order.
func childrenOf(stats map[int]Stat) map[int][]int {
	children := map[int][]int{}
	for pid, st := range stats {
		children[st.PPid] = append(children[st.PPid], pid)
	}
	for _, c := range children {
		slices.Sort(c)
	}
	return children
}

// treeOf lists pid and its descendants in children, pid first, each
// parent before its children. A pid seen once is not followed again: a
// snapshot read while a pid is reused can make a loop.
func treeOf(pid int, children map[int][]int) []int {
	out := []int{pid}
	seen := map[int]bool{pid: true}
	for i := 0; i < len(out); i++ {
		for _, c := range children[out[i]] {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	return out
}
