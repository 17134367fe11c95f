package main

import (
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/pipebackup/pipe/internal/procmem"
)

// rssSampler follows the summed resident memory of a process and of its
// descendants that run the same executable (pipe and its plugin processes;
// not the commands an exec endpoint runs), every 20 ms. The kernel's maxrss
// cannot tell that sum: it is the largest single process. RSS counts pages
// the processes share (the binary's own) once in each; PSS divides them
// among their sharers, so its sum is what the run takes from the machine.
// PSS is read every 10th sample only: smaps_rollup walks every mapping
// under the process's memory lock, which slows a run sampled every 20 ms.
type rssSampler struct {
	stop    chan struct{}
	done    sync.WaitGroup
	peak    int64
	peakPSS int64
}

func sampleRSS(pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{})}
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			if exe == "" {
				exe, _ = os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			}
			rss, pss := treeRSS(pid, exe, i%10 == 0)
			s.peak, s.peakPSS = max(s.peak, rss), max(s.peakPSS, pss)
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Peak stops sampling and returns the largest sums seen, of RSS and of
// PSS, in bytes.
func (s *rssSampler) Peak() (rss, pss int64) {
	close(s.stop)
	s.done.Wait()
	return s.peak, s.peakPSS
}

// treeRSS sums RSS, and PSS if withPSS, over pid and its descendants
// running exe.
func treeRSS(pid int, exe string, withPSS bool) (rss, pss int64) {
	children := procmem.Children()
	var walk func(int)
	walk = func(p int) {
		if e, _ := os.Readlink("/proc/" + strconv.Itoa(p) + "/exe"); e == exe || p == pid {
			n, _ := procmem.Field(p, "status", "VmRSS:")
			rss += n
			if withPSS {
				n, _ := procmem.Field(p, "smaps_rollup", "Pss:")
				pss += n
			}
		}
		for _, c := range children[p] {
			walk(c)
		}
	}
	walk(pid)
	return rss, pss
}
