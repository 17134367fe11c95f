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
// → exec sink) for each input size and reads pipe's peak RSS: the sum over
// its process tree, sampled, and never below the kernel's maxrss of the
// largest process (rusage of the waited-for process).
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
		budget, err := planBudget(ctx, b.cfg.pipe, file)
		if err != nil {
			return nil, err
		}
		if i > 0 && budget != res.budget {
			return nil, fmt.Errorf("the budget depends on the input size: %d vs %d", budget, res.budget)
		}
		res.budget = budget
		run, err := b.memoryRun(ctx, file, n)
		if err != nil {
			return nil, err
		}
		res.runs = append(res.runs, run)
	}
	return res, nil
}

// memoryRun runs the memory pipeline file on n bytes once, following the
// memory of pipe's process tree.
func (b *bench) memoryRun(ctx context.Context, file string, n int64) (memRun, error) {
	settle()
	m, err := runPipeRSS(ctx, b.cfg.pipe, file, n)
	if err != nil {
		return memRun{}, err
	}
	s := m.summary
	// Encrypted output carries per-chunk overhead; anything far from the
	// data's compression ratio means the pipeline did not do its work.
	if ratio := float64(n) / float64(s.BytesWritten); ratio < 1.5 || ratio > 10 {
		return memRun{}, fmt.Errorf("memory run of %s wrote %d bytes (%.2f×): not a plausible compressed size", mib(n), s.BytesWritten, ratio)
	}
	peak := max(m.treeRSS, m.maxRSS)
	logf("  %-10s peak RSS %s, PSS %s (pipe and its plugins, summed) in %.1fs (%s), bottleneck %s", mib(n), mib(peak), mib(m.treePSS), m.wall.Seconds(), rate(n, m.wall), s.Bottleneck)
	return memRun{input: n, peak: peak, pss: m.treePSS, wall: m.wall, summary: *s}, nil
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

// races: the memory scenario runs no race, one run per input size.
func (m *memoryResult) races() []*race { return nil }

func (m *memoryResult) markdown(w writer) {
	w("\n## Memory\n\n")
	w("A balanced-profile backup: exec source (the harness's own binary as generator, `bench gen -bytes N`: the same pg_dump text) → compress zstd → encrypt (age, throwaway key) → checksum → exec sink (`cat >/dev/null`). ")
	w("Peak RSS is the resident memory of `pipe run` and its plugin processes (the same binary), summed, sampled every 20 ms (and never below the kernel's maxrss of the largest); the commands the exec endpoints run (the generator, cat) are not pipe and not counted. The sum counts the pages the processes share (the binary's own) once in each, so it is an upper bound; peak PSS (sampled every 200 ms), which divides shared pages among their sharers, is what the run takes from the machine. The targets are checked on the RSS sum. ")
	w("Budget: `pipe plan --json`, pipelines[].memory_bytes.budget = %s.\n\n", mib(m.budget))
	w.table("input", "peak RSS", "peak PSS", "wall", "throughput", "bottleneck named")
	for _, run := range m.runs {
		w("| %s | %s | %s | %.1f s | %s | %s |\n", mib(run.input), mib(run.peak), mib(run.pss), run.wall.Seconds(), rate(run.input, run.wall), run.summary.Bottleneck)
	}
	w("\n")
	w.table("measure", "value", "target", "met?")
	for _, run := range m.runs {
		w("| peak RSS, %s input | %s | ≤ %s and ≤ budget (%s) | %s |\n", mib(run.input), mib(run.peak), mib(memoryTarget), mib(m.budget),
			yesNo(run.peak <= memoryTarget && run.peak <= m.budget))
	}
	if len(m.runs) == 2 {
		ratio := float64(m.runs[1].peak) / float64(m.runs[0].peak)
		w("| peak %s / peak %s | %.2f | ≤ 1.10 | %s |\n", mib(m.runs[1].input), mib(m.runs[0].input), ratio, yesNo(ratio <= 1.1))
	}
	for _, run := range m.runs {
		w("| peak / budget, %s input | %.2f | ≤ 1.00 | %s |\n", mib(run.input), float64(run.peak)/float64(m.budget), yesNo(run.peak <= m.budget))
	}
	w("\n<details><summary>pipeline (N = input bytes)</summary>\n\n```hcl\n%s```\n\n</details>\n", m.pipeline)
	if len(m.runs) > 0 {
		last := m.runs[len(m.runs)-1]
		w("\nStages of the %s run: %s.\n", mib(last.input), stageList(last.summary))
	}
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
