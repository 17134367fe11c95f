package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// The report: a header (the machine, the tools, the command), the
// Throughput table of the local scenarios and what pipe's run summaries
// said of them, each other scenario's section, and every run's times.
// docs/benchmarks.md quotes its rows and links to its sections: a change
// of a row or a heading is a change of every report after it
// (testdata/report.golden.md holds one, rendered from fake results).

// section is a scenario's own part of the report.
type section interface {
	// markdown writes the section, from its "## " heading on.
	markdown(w writer)
	// races are its races, as "Every run" lists them.
	races() []*race
}

// The report's sections come in sectionOrder, and "Every run" lists their
// races in everyRunOrder: both orders are older than the registry, and
// kept so that reports stay comparable line by line. A section named in
// neither comes after those, in the order its scenario ran.
var (
	sectionOrder  = []string{"memory", "s3", "postgres", "catalog", "pgcluster", "mysqlcluster", "wal", "basebackup"}
	everyRunOrder = []string{"s3", "postgres", "wal", "basebackup", "pgcluster", "mysqlcluster", "catalog"}
)

// writer appends formatted text to the report.
type writer func(format string, args ...any)

// table writes a markdown table's header row and the row under it.
func (w writer) table(columns ...string) {
	w("| %s |\n|%s\n", strings.Join(columns, " | "), strings.Repeat("---|", len(columns)))
}

// report collects the results and renders them as markdown.
type report struct {
	env     environment
	cfg     config
	command string
	// throughput are the rows of the Throughput table, in run order.
	throughput []*race
	// startup is a one-byte run with the endpoints in their plugin
	// process (pipe) and in-process (the reference); nil: not measured.
	startup  *race
	sections []namedSection // in run order
}

type namedSection struct {
	name string
	section
}

// add puts a scenario's section into the report.
func (r *report) add(name string, s section) {
	r.sections = append(r.sections, namedSection{name, s})
}

// ordered lists the sections as order names them, then the others in run
// order.
func (r *report) ordered(order []string) []section {
	rank := func(name string) int {
		if i := slices.Index(order, name); i >= 0 {
			return i
		}
		return len(order)
	}
	ns := slices.Clone(r.sections)
	slices.SortStableFunc(ns, func(a, b namedSection) int { return rank(a.name) - rank(b.name) })
	out := make([]section, len(ns))
	for i, s := range ns {
		out[i] = s.section
	}
	return out
}

func (r *report) markdown() string {
	var b strings.Builder
	w := writer(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	r.header(w)
	r.throughputTable(w)
	r.summaryTable(w)
	for _, s := range r.ordered(sectionOrder) {
		s.markdown(w)
	}
	r.everyRun(w)
	return b.String()
}

func (r *report) header(w writer) {
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
}

// throughputTable is the Throughput section: a row per reference of each
// local race, the start-up cost, the races' notes.
func (r *report) throughputTable(w writer) {
	w("## Throughput\n\n")
	w.table("scenario", "data", "pipe", "reference", "ratio", "target", "met?")
	for _, s := range r.throughput {
		pm := s.pipe.median()
		for _, ref := range s.refs {
			rm := ref.median()
			ratio := speedup(pm, rm)
			w("| %s | %s | %s | %s: %s | %.2f× | ≥ %.2f× | %s |\n",
				s.name, s.data, rate(s.bytes, pm), ref.label, rate(s.bytes, rm), ratio, ref.target, yesNo(ratio >= ref.target))
		}
	}
	w("\nThroughput is uncompressed MB (10⁶ bytes) over the median wall time of the whole process, start to exit (pipe: `pipe run FILE.hcl --json --progress never`); ratio = pipe / reference. ")
	w("pipe's fs sink fsyncs every file before renaming it into place; cp and zstd do not, so each scenario is also compared with the reference followed by `sync -d OUT` (timed together), which is the like-for-like durable comparison. ")
	w("The page cache holds the input for every run; the disk is synced, untimed, before each run.\n\n")
	if s := r.startup; s != nil {
		plugin, inproc := s.pipe.median(), s.refs[0].median()
		extra := plugin - inproc
		w("\nStart-up: a one-byte fs → fs run takes %s with the built-in endpoints in their plugin process and %s in-process (median of %d each): the plugin process adds %s (goal: under 50 ms for a run with two plugins; the fs source and sink share one process). %s\n\n",
			plugin.Round(100*time.Microsecond), inproc.Round(100*time.Microsecond), len(s.pipe.times), extra.Round(100*time.Microsecond), yesNo(extra < 50*time.Millisecond))
	}
	for _, s := range r.throughput {
		for _, n := range s.notes {
			w("- %s: %s\n", s.name, n)
		}
	}
}

// summaryTable says what pipe's own run summaries named, per local race.
func (r *report) summaryTable(w writer) {
	w("\n### What pipe's run summary says\n\n")
	w.table("scenario", "bottleneck named (runs)", "stages in the median run: busy %, wait for input / blocked on output")
	for _, s := range r.throughput {
		w("| %s | %s | %s |\n", s.name, bottlenecks(s.pipeRuns), stages(s.pipeRuns, s.pipe.times))
	}
}

// everyRun lists every race's runs in order, and each contender's spread
// and CPU.
func (r *report) everyRun(w writer) {
	w("\n## Every run\n\n")
	w("Wall seconds in the order they ran (after one untimed warm-up round). CPU time is less sensitive to a busy machine than wall time: it shows the work each tool does for the same bytes.\n\n")
	all := slices.Clone(r.throughput)
	for _, s := range r.ordered(everyRunOrder) {
		all = append(all, s.races()...)
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
		for _, c := range s.contenders() {
			if len(c.times) == 0 {
				w("  - %s: not run (-skip-barman)\n", c.label)
				continue
			}
			w("  - %s: wall min %.3f, median %.3f, max %.3f; CPU (user+sys) median %.2f s\n", c.label,
				minD(c.times).Seconds(), c.median().Seconds(), maxD(c.times).Seconds(), c.medianCPU().Seconds())
		}
	}
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

// cpuPerRun is the sentence of the database sections on the client
// processes' CPU: each race (named as its direction, or by its own name)
// and each contender's median.
func cpuPerRun(w writer, races []namedRace) {
	w("\nCPU seconds per run (user + system of the client processes; the server's work is not counted): ")
	for _, d := range races {
		for _, c := range d.race.contenders() {
			w("%s %s %.1f s; ", d.name, c.label, c.medianCPU().Seconds())
		}
	}
	w("\n")
}

// namedRace is a race and the name a section gives it.
type namedRace struct {
	name string
	race *race
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
