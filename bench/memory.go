package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/pipebackup/pipe/internal/procmem"
)

// memoryTarget is the most RSS a balanced backup may use, whatever its
// input size.
const memoryTarget = 256 << 20

// memRun is one memory-benchmark run.
type memRun struct {
	input   int64
	peak    int64 // bytes
	pss     int64 // bytes, the peak of the summed PSS
	wall    time.Duration
	summary pipelineRun
}

// memoryResult is the memory table.
type memoryResult struct {
	budget   int64
	pipeline string // the pipeline file, for the report
	runs     []memRun
}

// memoryScenario runs a balanced backup (exec source → zstd → age → sha256
// → exec sink) for each input size and reads pipe's peak RSS from the
// kernel (rusage of the waited-for process).
func (b *bench) memoryScenario(ctx context.Context) (*memoryResult, error) {
	logf("scenario 4: peak RSS of a balanced backup pipeline")
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	keys := filepath.Join(b.hcl, "keys", "bench")
	if _, err := timeCommand(ctx, []string{b.cfg.pipe, "keygen", "-o", keys}); err != nil {
		return nil, err
	}
	res := &memoryResult{
		pipeline: "pipeline \"memory\" {\n" + memoryPipeline([]string{"bench", "gen", "-bytes", "N"}, "keys/bench.pub") + "}\n",
	}
	for i, n := range b.cfg.memSizes {
		body := memoryPipeline([]string{self, "gen", "-bytes", strconv.FormatInt(n, 10)}, keys+".pub")
		file, err := writePipeline(b.hcl, fmt.Sprintf("memory-%d", i), body)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			if res.budget, err = planBudget(ctx, b.cfg.pipe, file); err != nil {
				return nil, err
			}
		} else if budget, err := planBudget(ctx, b.cfg.pipe, file); err != nil {
			return nil, err
		} else if budget != res.budget {
			return nil, fmt.Errorf("the budget depends on the input size: %d vs %d", budget, res.budget)
		}
		settle()
		r, err := runPipeRSS(ctx, b.cfg.pipe, file, n)
		if err != nil {
			return nil, err
		}
		// Encrypted output carries per-chunk overhead; anything far from
		// the data's compression ratio means the pipeline did not do its
		// work.
		if ratio := float64(n) / float64(r.summary.BytesWritten); ratio < 1.5 || ratio > 10 {
			return nil, fmt.Errorf("memory run of %s wrote %d bytes (%.2f×): not a plausible compressed size", mib(n), r.summary.BytesWritten, ratio)
		}
		peak := max(r.treeRSS, r.maxRSS)
		logf("  %-10s peak RSS %s, PSS %s (pipe and its plugins, summed) in %.1fs (%s), bottleneck %s", mib(n), mib(peak), mib(r.treePSS), r.wall.Seconds(), rate(n, r.wall), r.summary.Bottleneck)
		res.runs = append(res.runs, memRun{input: n, peak: peak, pss: r.treePSS, wall: r.wall, summary: r.summary})
	}
	return res, nil
}

// memoryPipeline is the body of the memory benchmark's pipeline: gen is
// the generator's command line, pub the age recipient file.
func memoryPipeline(gen []string, pub string) string {
	return fmt.Sprintf(`  profile = "balanced"

  source "exec" {
    command = %s
    name    = "pgdump.sql"
  }

  compress {
    codec = "zstd"
  }

  encrypt {
    recipients = [file(%s)]
  }

  checksum {}

  sink "exec" {
    command = ["sh", "-c", "cat >/dev/null"]
  }
`, hclList(gen...), hclString(pub))
}

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
	exe := procmem.Exe(pid)
	s.done.Add(1)
	go func() {
		defer s.done.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			if exe == "" {
				exe = procmem.Exe(pid)
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
	for _, p := range procmem.Tree(pid) {
		if p != pid && procmem.Exe(p) != exe {
			continue
		}
		n, _ := procmem.Field(p, "status", "VmRSS:")
		rss += n
		if withPSS {
			n, _ := procmem.Field(p, "smaps_rollup", "Pss:")
			pss += n
		}
	}
	return rss, pss
}
