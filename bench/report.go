package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// report collects the results and renders them as markdown.
type report struct {
	env       environment
	cfg       config
	command   string
	scenarios []*scenarioResult
	memory    *memoryResult
	// startup* are the median wall times of a one-byte copy with the
	// endpoints in their plugin process and in-process (0: not measured).
	startupPlugin, startupInProcess time.Duration
	s3                              *s3Result
	pg                              *pgResult
	catalog                         *catalogResult
	wal                             *walResult
	base                            *baseResult
	pgCluster                       *pgClusterResult
	mysqlCluster                    *mysqlClusterResult
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func (r *report) markdown() string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	e := r.env
	mode := "full"
	if r.cfg.quick {
		mode = "quick (-quick: small sizes, not for comparison)"
	}
	w("# pipe benchmarks\n\n")
	w("- date: %s\n", e.date)
	w("- CPU: %s, %d CPUs\n", e.cpu, e.cpus)
	w("- memory: %s\n", e.memory)
	w("- kernel: %s\n", e.kernel)
	w("- zstd: %s\n", e.zstd)
	w("- cp: %s\n", e.cp)
	w("- pipe: %s (%s)\n", e.pipe, r.cfg.pipe)
	w("- Go (harness): %s\n", e.goVersion)
	w("- work folder: %s (%s)\n", r.cfg.workDir, e.fs)
	w("- load average at start / end: %s / %s\n", e.loadStart, e.loadEnd)
	w("- mode: %s; %d runs of each tool per scenario, interleaved\n\n", mode, r.cfg.reps)
	w("Reproduce: `%s` (after `make build`; `make bench` does both)\n\n", r.command)

	w("## Throughput\n\n")
	w("| scenario | data | pipe | reference | ratio | target | met? |\n")
	w("|---|---|---|---|---|---|---|\n")
	for _, s := range r.scenarios {
		pm := median(s.pipe.times)
		for _, ref := range s.refs {
			rm := median(ref.times)
			ratio := rm.Seconds() / pm.Seconds()
			w("| %s | %s | %s | %s: %s | %.2f× | ≥ %.2f× | %s |\n",
				s.name, s.data, rate(s.bytes, pm), ref.label, rate(s.bytes, rm), ratio, ref.target, yesNo(ratio >= ref.target))
		}
	}
	w("\nThroughput is uncompressed MB (10⁶ bytes) over the median wall time of the whole process, start to exit (pipe: `pipe run FILE.hcl --json --progress never`); ratio = pipe / reference. ")
	w("pipe's fs sink fsyncs every file before renaming it into place; cp and zstd do not, so each scenario is also compared with the reference followed by `sync -d OUT` (timed together), which is the like-for-like durable comparison. ")
	w("The page cache holds the input for every run; the disk is synced, untimed, before each run.\n\n")
	if r.startupPlugin > 0 {
		extra := r.startupPlugin - r.startupInProcess
		w("\nStart-up: a one-byte fs → fs run takes %s with the built-in endpoints in their plugin process and %s in-process (median of 21 each): the plugin process adds %s (goal: under 50 ms for a run with two plugins; the fs source and sink share one process). %s\n\n",
			r.startupPlugin.Round(100*time.Microsecond), r.startupInProcess.Round(100*time.Microsecond), extra.Round(100*time.Microsecond), yesNo(extra < 50*time.Millisecond))
	}
	for _, s := range r.scenarios {
		for _, n := range s.notes {
			w("- %s: %s\n", s.name, n)
		}
	}

	w("\n### What pipe's run summary says\n\n")
	w("| scenario | bottleneck named (runs) | stages in the median run: busy %%, wait for input / blocked on output |\n")
	w("|---|---|---|\n")
	for _, s := range r.scenarios {
		w("| %s | %s | %s |\n", s.name, bottlenecks(s.pipeRuns), stages(s.pipeRuns, s.pipe.times))
	}

	if m := r.memory; m != nil {
		r.memoryMarkdown(&b, m)
	}
	if r.s3 != nil {
		r.s3.markdown(w)
	}
	if r.pg != nil {
		r.pg.markdown(w)
	}
	if r.catalog != nil {
		r.catalog.markdown(w)
	}
	if r.pgCluster != nil {
		r.pgCluster.markdown(w)
	}
	if r.mysqlCluster != nil {
		r.mysqlCluster.markdown(w)
	}
	if r.wal != nil {
		r.wal.markdown(w)
	}
	if r.base != nil {
		r.base.markdown(w)
	}

	w("\n## Every run\n\n")
	w("Wall seconds in the order they ran (after one untimed warm-up round). CPU time is less sensitive to a busy machine than wall time: it shows the work each tool does for the same bytes.\n\n")
	all := r.scenarios
	if r.s3 != nil {
		all = append(all[:len(all):len(all)], r.s3.upload, r.s3.download)
	}
	if r.pg != nil {
		all = append(all[:len(all):len(all)], r.pg.backup, r.pg.restore)
	}
	if r.wal != nil {
		all = append(all[:len(all):len(all)], r.wal.single, r.wal.burst, r.wal.fetch)
	}
	if r.base != nil {
		all = append(all[:len(all):len(all)], r.base.backup, r.base.restore)
	}
	if r.pgCluster != nil {
		all = append(all[:len(all):len(all)], r.pgCluster.backup, r.pgCluster.restore)
	}
	if r.mysqlCluster != nil {
		all = append(all[:len(all):len(all)], r.mysqlCluster.backup, r.mysqlCluster.restore)
	}
	if r.catalog != nil {
		all = append(all[:len(all):len(all)], r.catalog.list, r.catalog.verify)
	}
	for _, s := range all {
		w("- %s:", s.name)
		for i, l := range s.runOrder {
			if i > 0 {
				w(",")
			}
			w(" %s %.3f", l, s.runTimes[i].Seconds())
		}
		w("\n")
		for _, c := range append([]*contender{s.pipe}, s.refs...) {
			w("  - %s: wall min %.3f, median %.3f, max %.3f; CPU (user+sys) median %.2f s\n", c.label,
				minD(c.times).Seconds(), median(c.times).Seconds(), maxD(c.times).Seconds(), median(c.cpu).Seconds())
		}
	}
	return b.String()
}

func (r *report) memoryMarkdown(b *strings.Builder, m *memoryResult) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	w("\n## Memory\n\n")
	w("A balanced-profile backup: exec source (the harness's own binary as generator, `bench gen -bytes N`: the same pg_dump text) → compress zstd → encrypt (age, throwaway key) → checksum → exec sink (`cat >/dev/null`). ")
	w("Peak RSS is the resident memory of `pipe run` and its plugin processes (the same binary), summed, sampled every 20 ms (and never below the kernel's maxrss of the largest); the commands the exec endpoints run (the generator, cat) are not pipe and not counted. The sum counts the pages the processes share (the binary's own) once in each, so it is an upper bound; peak PSS (sampled every 200 ms), which divides shared pages among their sharers, is what the run takes from the machine. The targets are checked on the RSS sum. ")
	w("Budget: `pipe plan --json`, pipelines[].memory_bytes.budget = %s.\n\n", mib(m.budget))
	w("| input | peak RSS | peak PSS | wall | throughput | bottleneck named |\n")
	w("|---|---|---|---|---|---|\n")
	for _, run := range m.runs {
		w("| %s | %s | %s | %.1f s | %s | %s |\n", mib(run.input), mib(run.peak), mib(run.pss), run.wall.Seconds(), rate(run.input, run.wall), run.summary.Bottleneck)
	}
	w("\n| measure | value | target | met? |\n")
	w("|---|---|---|---|\n")
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
		last := m.runs[len(m.runs)-1].summary
		w("\nStages of the %s run: %s.\n", mib(m.runs[len(m.runs)-1].input), stageList(last))
	}
}

// bottlenecks counts the positions pipe named as its bottleneck.
func bottlenecks(runs []pipelineRun) string {
	count := map[string]int{}
	for _, r := range runs {
		name := r.Bottleneck
		if name == "" {
			name = "(none)"
		}
		count[name]++
	}
	names := make([]string, 0, len(count))
	for n := range count {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if count[names[i]] != count[names[j]] {
			return count[names[i]] > count[names[j]]
		}
		return names[i] < names[j]
	})
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s (%d/%d)", n, count[n], len(runs))
	}
	return strings.Join(parts, ", ")
}

// stages describes the stage meters of the run whose wall time is nearest
// the median.
func stages(runs []pipelineRun, times []time.Duration) string {
	if len(runs) == 0 || len(runs) != len(times) {
		return ""
	}
	return stageList(runs[nearestIndex(times, median(times))])
}

func stageList(r pipelineRun) string {
	parts := make([]string, len(r.Stages))
	for i, st := range r.Stages {
		name := st.Name
		if st.Workers > 1 {
			name = fmt.Sprintf("%s ×%d", name, st.Workers)
		}
		parts[i] = fmt.Sprintf("%s %.0f%% (%.2fs / %.2fs)", name, st.Utilization*100,
			time.Duration(st.WaitInNS).Seconds(), time.Duration(st.BlockedNS).Seconds())
	}
	return strings.Join(parts, "; ") + fmt.Sprintf("; run %.2fs", r.Seconds)
}

func minD(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}

func maxD(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}
