package main

import (
	"context"
	"fmt"
	"os"
	"time"
)

// A race is what every scenario measures: pipe against one or more
// references on the same work, run round-robin (pipe, ref, ref, pipe, …)
// so that a slow patch of a noisy machine hits all of them, and compared
// by the medians of their wall times. A contender is a label and a run (a
// command, a shell script, a `pipe run`, or any function), with the
// output's check and the clean-up before its next run beside it.

// runFunc is one timed run of a contender; rep 0 is the untimed warm-up.
type runFunc func(ctx context.Context, rep int) (measurement, error)

// checkFunc verifies the output of a run: in full when rep is 0, more
// cheaply (its size) after. The time it takes is not the run's.
type checkFunc func(ctx context.Context, rep int) error

// contender is one tool in a race.
type contender struct {
	label  string
	target float64 // for references: the least pipe/reference ratio wanted
	// clean removes the contender's previous output. It runs right before
	// the contender's own next run, for every contender alike: the memory
	// a deleted file frees is what the next write gets, and on a VM that
	// hands idle free memory back to the host, pages freed seconds earlier
	// are slow to touch again. Deleting a tool's output just before its own
	// run puts every tool in the same state.
	clean func()
	run   runFunc
	check checkFunc // nil: a run that succeeds is enough
	// skip leaves the contender out of the race (-skip-barman): it has
	// no runs, and its median is 0.
	skip bool

	// What the race measured, in run order (the warm-up left out).
	times  []time.Duration // wall
	cpu    []time.Duration // user + system
	maxRSS int64           // the largest process's peak over every run, warm-up included (rusage)
}

// median is the median wall time of the contender's runs.
func (c *contender) median() time.Duration { return median(c.times) }

// medianCPU is the median CPU time (user + system) of its runs.
func (c *contender) medianCPU() time.Duration { return median(c.cpu) }

// race is pipe against its references, and what the runs measured.
type race struct {
	name  string
	data  string // what the race moves, for the Throughput table
	bytes int64  // uncompressed bytes moved per run, for throughputs
	pipe  *contender
	refs  []*contender
	notes []string
	// noWarmup skips the untimed first round: runs so long that caches
	// are warm after the first seconds of each.
	noWarmup bool
	// noSync leaves the disk as it is before each run: runs of tens of
	// milliseconds that write next to nothing (the start-up cost, a WAL
	// segment's push), measured back to back as a user runs them.
	noSync bool

	pipeRuns []pipelineRun // pipe's own summaries of its `pipe run`s, in run order
	runOrder []string      // labels in the order they ran, for "Every run"
	runTimes []time.Duration
}

// contenders are pipe and the references, in run order.
func (r *race) contenders() []*contender {
	return append([]*contender{r.pipe}, r.refs...)
}

// run runs the contenders round-robin, reps times each. A first, untimed
// round warms up binaries and caches; it is also the run whose output is
// checked in full (rep 0). Before each run the contender cleans up after
// its previous one and the disk is synced, so that what one run left
// dirty is not written during the next.
func (r *race) run(ctx context.Context, reps int) error {
	first := 0
	if r.noWarmup {
		first = 1
	}
	for rep := first; rep <= reps; rep++ {
		for _, c := range r.contenders() {
			if c.skip {
				continue
			}
			if err := r.runOnce(ctx, c, rep); err != nil {
				return fmt.Errorf("%s, %s, run %d: %w", r.name, c.label, rep, err)
			}
		}
	}
	return nil
}

// runOnce runs c once and records what it measured.
func (r *race) runOnce(ctx context.Context, c *contender, rep int) error {
	if c.clean != nil {
		c.clean()
	}
	if !r.noSync {
		settle()
	}
	m, err := c.run(ctx, rep)
	c.maxRSS = max(c.maxRSS, m.maxRSS)
	if err != nil {
		return err
	}
	if c == r.pipe && m.summary != nil && rep > 0 {
		r.pipeRuns = append(r.pipeRuns, *m.summary)
	}
	if c.check != nil {
		if err := c.check(ctx, rep); err != nil {
			return err
		}
	}
	if rep == 0 {
		logf("  %-28s warm-up: %7.3fs (untimed)", c.label, m.wall.Seconds())
		return nil
	}
	c.times = append(c.times, m.wall)
	c.cpu = append(c.cpu, m.cpu)
	r.runOrder = append(r.runOrder, c.label)
	r.runTimes = append(r.runTimes, m.wall)
	logf("  %-28s run %d: %7.3fs  %-10s cpu %6.2fs", c.label, rep, m.wall.Seconds(), rate(r.bytes, m.wall), m.cpu.Seconds())
	return nil
}

// commands runs the commands one after the other, without a shell, with
// env added to the environment, timed together (timeCommands).
func commands(env []string, cmds ...[]string) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		return timeCommands(ctx, env, cmds...)
	}
}

// script runs a bash script, a pipeline failing when any of its commands
// fails.
func script(text string, env []string) runFunc {
	return commands(env, []string{"bash", "-o", "pipefail", "-c", text})
}

// pipeRun runs `pipe run file`, which must read want bytes (want < 0:
// any); pipe's summary goes to the race.
func (b *bench) pipeRun(file string, want int64, env ...string) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		return runPipe(ctx, b.cfg.pipe, file, want, env...)
	}
}

// sizeIs checks that path is a file of want bytes (want < 0: any
// non-empty file).
func sizeIs(path string, want int64) checkFunc {
	return func(ctx context.Context, rep int) error {
		_, err := checkSize(path, want)
		return err
	}
}

// sameAs checks path's size on every run, and on the first that it holds
// exactly the bytes of the file orig.
func sameAs(path, orig string, size int64) checkFunc {
	return func(ctx context.Context, rep int) error {
		if _, err := checkSize(path, size); err != nil {
			return err
		}
		if rep == 0 {
			return sameFile(path, orig)
		}
		return nil
	}
}

// removing is a clean that deletes path and what it holds.
func removing(path string) func() {
	return func() { os.RemoveAll(path) }
}
