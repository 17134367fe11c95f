package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// bench holds what the scenarios share.
type bench struct {
	cfg  config
	data string // the data set
	size int64  // its size, the basis of every throughput
	work string // outputs go here
	hcl  string // pipeline files go here

	zst string // pipe's compressed data set, kept for the decompress scenario

	s3Size int64 // the object-store scenario's object
}

// contender is one tool in a scenario; run performs one repetition (rep 0
// is the untimed warm-up), checks its output (in full when rep is 0) and
// removes it.
type contender struct {
	label  string
	target float64 // for references: the least pipe/reference ratio wanted
	// clean removes the contender's previous output. It runs right before
	// the contender's own next run, for every contender alike: the memory
	// a deleted file frees is what the next write gets, and on a VM that
	// hands idle free memory back to the host, pages freed seconds earlier
	// are slow to touch again. Deleting a tool's output just before its own
	// run puts every tool in the same state.
	clean  func()
	env    []string // extra environment (pipe contenders)
	run    func(ctx context.Context, rep int) (measurement, error)
	times  []time.Duration // wall
	cpu    []time.Duration // user + system
	maxRSS int64           // the largest process's peak over every run, warm-up included (rusage)
}

// scenarioResult is one row group of the report.
type scenarioResult struct {
	name     string
	data     string
	bytes    int64 // uncompressed bytes moved per run
	pipe     *contender
	refs     []*contender
	pipeRuns []pipelineRun // pipe's own summaries, in run order
	notes    []string
	runOrder []string // labels in the order they ran, for the details
	runTimes []time.Duration
	// noWarmup skips the untimed first round: runs so long that caches
	// are warm after the first seconds of each.
	noWarmup bool
}

// interleave runs the contenders round-robin, reps times each: pipe, ref,
// ref, pipe, ref, ref, … so a slow patch of a noisy machine hits all. A
// first, untimed round warms up binaries and caches; it is also the run
// whose output is checked in full (rep 0).
func (s *scenarioResult) interleave(ctx context.Context, reps int) error {
	all := append([]*contender{s.pipe}, s.refs...)
	first := 0
	if s.noWarmup {
		first = 1
	}
	for rep := first; rep <= reps; rep++ {
		for _, c := range all {
			if c.clean != nil {
				c.clean()
			}
			settle()
			m, err := c.run(ctx, rep)
			d := m.wall
			c.maxRSS = max(c.maxRSS, m.maxRSS)
			if err != nil {
				return fmt.Errorf("%s, %s, run %d: %w", s.name, c.label, rep, err)
			}
			if rep == 0 {
				logf("  %-28s warm-up: %7.3fs (untimed)", c.label, d.Seconds())
				if c == s.pipe {
					s.pipeRuns = s.pipeRuns[:0]
				}
				continue
			}
			c.times = append(c.times, d)
			c.cpu = append(c.cpu, m.cpu)
			s.runOrder = append(s.runOrder, c.label)
			s.runTimes = append(s.runTimes, d)
			logf("  %-28s run %d: %7.3fs  %-10s cpu %6.2fs", c.label, rep, d.Seconds(), rate(s.bytes, d), m.cpu.Seconds())
		}
	}
	return nil
}

// pipeContender runs file with pipe; check verifies the output of a run
// and removes it.
func (b *bench) pipeContender(s *scenarioResult, file, outDir string, want int64, check func(ctx context.Context, rep int) error) *contender {
	c := &contender{label: "pipe", clean: func() { os.RemoveAll(outDir) }}
	c.run = func(ctx context.Context, rep int) (measurement, error) {
		r, err := runPipe(ctx, b.cfg.pipe, file, want, c.env...)
		if err != nil {
			return r.measurement, err
		}
		if c == s.pipe {
			s.pipeRuns = append(s.pipeRuns, r.summary)
		}
		return r.measurement, check(ctx, rep)
	}
	return c
}

// refContender times the commands, then verifies out.
func refContender(label string, target float64, out string, want int64, env []string, cmds ...[]string) *contender {
	return &contender{label: label, target: target, clean: func() { os.Remove(out) }, run: func(ctx context.Context, rep int) (measurement, error) {
		m, err := timeCommands(ctx, env, cmds...)
		if err != nil {
			return m, err
		}
		_, err = checkSize(out, want)
		return m, err
	}}
}

// copyScenario: fs → fs with no stages vs cp, and cp + sync -d.
func (b *bench) copyScenario(ctx context.Context) (*scenarioResult, error) {
	logf("scenario 1: fs → fs, no stages, vs cp")
	s := &scenarioResult{name: "fs → fs copy, no stages", data: b.dataLabel(), bytes: b.size}
	outDir := filepath.Join(b.work, "pipe-copy")
	file, err := writePipeline(b.hcl, "copy", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  sink "fs" {
    path = %s
  }
`, hclString(b.data), hclString(outDir+"/")))
	if err != nil {
		return nil, err
	}
	s.pipe = b.pipeContender(s, file, outDir, b.size, func(ctx context.Context, rep int) error {
		out := filepath.Join(outDir, filepath.Base(b.data))
		if _, err := checkSize(out, b.size); err != nil {
			return err
		}
		if rep == 0 {
			return sameFile(out, b.data)
		}
		return nil
	})
	cpOut := filepath.Join(b.work, "cp.out")
	s.refs = []*contender{
		refContender("cp", 0.9, cpOut, b.size, nil, []string{"cp", b.data, cpOut}),
		refContender("cp + sync -d", 0.9, cpOut, b.size, nil, []string{"cp", b.data, cpOut}, []string{"sync", "-d", cpOut}),
	}
	os.RemoveAll(outDir)
	defer os.RemoveAll(outDir)
	defer os.Remove(cpOut)
	return s, s.interleave(ctx, b.cfg.reps)
}

// compressScenario: zstd -3 with 2 workers vs zstd -3 -T2; keeps pipe's
// output of the first run for the decompress scenario.
func (b *bench) compressScenario(ctx context.Context) (*scenarioResult, error) {
	logf("scenario 2: zstd -3, 2 workers, vs zstd -3 -T2")
	s := &scenarioResult{name: "compress zstd -3, 2 workers", data: b.dataLabel(), bytes: b.size}
	outDir := filepath.Join(b.work, "pipe-zst")
	file, err := writePipeline(b.hcl, "compress", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  compress {
    codec   = "zstd"
    level   = 3
    workers = 2
  }
  sink "fs" {
    path = %s
  }
`, hclString(b.data), hclString(outDir+"/")))
	if err != nil {
		return nil, err
	}
	keepDir := filepath.Join(b.work, "zst")
	if err := os.MkdirAll(keepDir, 0o755); err != nil {
		return nil, err
	}
	var sizes []int64
	s.pipe = b.pipeContender(s, file, outDir, b.size, func(ctx context.Context, rep int) error {
		out := filepath.Join(outDir, filepath.Base(b.data)+".zst")
		n, err := checkSize(out, -1)
		if err != nil {
			return err
		}
		if n >= b.size {
			return fmt.Errorf("%s: %d bytes from %d did not compress", out, n, b.size)
		}
		sizes = append(sizes, n)
		if rep == 0 {
			if err := sameAfterZstd(ctx, out, b.data); err != nil {
				return err
			}
			b.zst = filepath.Join(keepDir, filepath.Base(out))
			return os.Rename(out, b.zst)
		}
		return nil
	})
	refOut := filepath.Join(b.work, "ref.zst")
	zstd := []string{"zstd", "-3", "-T2", "-f", "-o", refOut, b.data}
	s.refs = []*contender{
		refContender("zstd -3 -T2", 1.0, refOut, -1, nil, zstd),
		refContender("zstd -3 -T2 + sync -d", 1.0, refOut, -1, nil, zstd, []string{"sync", "-d", refOut}),
	}
	os.RemoveAll(outDir)
	defer os.RemoveAll(outDir)
	if err := s.interleave(ctx, b.cfg.reps); err != nil {
		return s, err
	}
	// One more, untimed, for the reference's compressed size.
	if _, err := timeCommands(ctx, nil, zstd); err != nil {
		return s, err
	}
	refSize, err := checkSize(refOut, -1)
	os.Remove(refOut)
	if err != nil {
		return s, err
	}
	s.notes = append(s.notes, fmt.Sprintf("Compressed size: pipe %s (%.2f×), zstd -3 %s (%.2f×).",
		mb(sizes[0]), float64(b.size)/float64(sizes[0]), mb(refSize), float64(b.size)/float64(refSize)))
	if r := float64(b.size) / float64(refSize); r < 2.5 || r > 4 {
		s.notes = append(s.notes, fmt.Sprintf("The data set compresses %.2f× with zstd -3, outside the intended 2.5-4×: check the generator.", r))
	}
	for _, n := range sizes[1:] {
		if n != sizes[0] {
			s.notes = append(s.notes, fmt.Sprintf("pipe's compressed size varied between runs: %v bytes.", sizes))
			break
		}
	}
	return s, nil
}

// decompressScenario: pipe's .zst from the compress scenario, decompressed
// by pipe (2 workers) and by zstd -d.
func (b *bench) decompressScenario(ctx context.Context) (*scenarioResult, error) {
	logf("scenario 3: decompress pipe's .zst, 2 workers, vs zstd -d")
	if b.zst == "" {
		return nil, fmt.Errorf("decompress needs the compress scenario's output")
	}
	s := &scenarioResult{name: "decompress zstd, 2 workers", data: "pipe's .zst of the data set", bytes: b.size}
	outDir := filepath.Join(b.work, "pipe-dec")
	file, err := writePipeline(b.hcl, "decompress", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  decompress {
    workers = 2
  }
  sink "fs" {
    path = %s
  }
`, hclString(b.zst), hclString(outDir+"/")))
	if err != nil {
		return nil, err
	}
	zi, err := os.Stat(b.zst)
	if err != nil {
		return nil, err
	}
	s.data = fmt.Sprintf("pipe's .zst of it (%s → %s)", mb(zi.Size()), mb(b.size))
	s.pipe = b.pipeContender(s, file, outDir, zi.Size(), func(ctx context.Context, rep int) error {
		out := filepath.Join(outDir, filepath.Base(b.data))
		if _, err := checkSize(out, b.size); err != nil {
			return err
		}
		if rep == 0 {
			return sameFile(out, b.data)
		}
		return nil
	})
	refOut := filepath.Join(b.work, "ref.out")
	zstd := []string{"zstd", "-d", "-f", "-o", refOut, b.zst}
	ref := refContender("zstd -d", 1.6, refOut, b.size, nil, zstd)
	refSync := refContender("zstd -d + sync -d", 1.6, refOut, b.size, nil, zstd, []string{"sync", "-d", refOut})
	// The reference's output is checked in full once too: it is the same
	// file, so both tools must produce the original bytes.
	first := ref.run
	ref.run = func(ctx context.Context, rep int) (measurement, error) {
		if rep > 0 {
			return first(ctx, rep)
		}
		m, err := timeCommands(ctx, nil, zstd)
		if err != nil {
			return m, err
		}
		return m, sameFile(refOut, b.data)
	}
	s.refs = []*contender{ref, refSync}
	os.RemoveAll(outDir)
	defer os.RemoveAll(outDir)
	defer os.Remove(refOut)
	return s, s.interleave(ctx, b.cfg.reps)
}

func (b *bench) dataLabel() string {
	return fmt.Sprintf("pg_dump text, %s", mb(b.size))
}
