package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/runner"
)

// runSummary is what a run reports, as text or JSON.
type runSummary struct {
	Pipeline   string            `json:"pipeline"`
	RunID      string            `json:"run_id"`
	OK         bool              `json:"ok"`
	Error      string            `json:"error,omitempty"`
	Seconds    float64           `json:"duration_seconds"`
	Restore    bool              `json:"restore"`
	Streams    int               `json:"streams"`
	Failed     []manifest.Failed `json:"failed_streams,omitempty"`
	Skipped    []string          `json:"skipped_streams,omitempty"`
	Incomplete []string          `json:"incomplete_streams,omitempty"`
	// FailedInBackup and Missing: a restore of a partial run.
	FailedInBackup []manifest.Failed        `json:"failed_in_backup,omitempty"`
	Missing        []string                 `json:"missing_streams,omitempty"`
	Damage         string                   `json:"damage,omitempty"`
	ManifestRead   string                   `json:"manifest_read,omitempty"`
	SignedBy       string                   `json:"manifest_signed_by,omitempty"`
	Manifests      []string                 `json:"manifests_written,omitempty"`
	BytesRead      int64                    `json:"bytes_read"`
	BytesWritten   int64                    `json:"bytes_written"`
	Bottleneck     string                   `json:"bottleneck,omitempty"`
	Stages         []engine.MeterReport     `json:"stages,omitempty"`
	Retention      []runner.RetentionReport `json:"retention,omitempty"`
	WALRetention   *runner.WALPrune         `json:"wal_retention,omitempty"`
	Memory         memorySummary            `json:"memory"`
	Positions      []engine.Position        `json:"-"`
	Wall           time.Duration            `json:"-"`
	p              *plan.Pipeline
	res            *engine.Result
}

type memorySummary struct {
	Budget      int64 `json:"budget_bytes"`
	Buffers     int   `json:"buffers"`
	PeakBuffers int   `json:"peak_buffers"`
}

func summarize(p *plan.Pipeline, rep *runner.Report, err error, secrets []string) runSummary {
	s := runSummary{Pipeline: p.Name, OK: err == nil, p: p}
	if err != nil {
		s.Error = scrub(err.Error(), secrets)
	}
	if rep == nil {
		return s
	}
	s.RunID, s.Restore, s.Streams, s.ManifestRead, s.Manifests = rep.RunID, rep.Restore, rep.Streams, rep.ManifestRead, rep.Manifests
	s.Retention, s.Failed, s.WALRetention, s.Skipped, s.Incomplete = rep.Retention, rep.Failed, rep.WALRetention, rep.Skipped, rep.Incomplete
	s.FailedInBackup, s.Missing, s.Damage, s.SignedBy = rep.FailedInBackup, rep.Missing, rep.Damage, rep.SignedBy
	s.Memory.Budget = rep.Budget
	if r := rep.Result; r != nil {
		s.res = r
		s.Wall = r.Finished.Sub(r.Started)
		s.Seconds = s.Wall.Seconds()
		s.Bottleneck = r.Bottleneck
		s.Stages = r.Meters
		s.Memory.Buffers, s.Memory.PeakBuffers = r.Layout.Buffers, r.PeakBuffers
		for _, st := range r.Streams {
			s.BytesRead += st.Read
			s.BytesWritten += st.Written
		}
	}
	return s
}

// printSummary prints a pipeline's run for people, on stderr.
func (a *app) printSummary(s runSummary) {
	status := "ok"
	if !s.OK {
		status = "FAILED"
	}
	fmt.Fprintf(a.stderr, "pipeline %q · run %s · %s in %s\n", s.Pipeline, s.RunID, status, s.Wall.Round(time.Millisecond))
	if s.res == nil {
		return
	}
	what := fmt.Sprintf("%d stream(s)", s.Streams)
	if s.ManifestRead != "" {
		what += " from manifest " + s.ManifestRead
	}
	if s.SignedBy != "" {
		what += ", signed by " + s.SignedBy
	}
	if len(s.Manifests) > 0 {
		what += ", manifest " + strings.Join(s.Manifests, ", ")
	}
	fmt.Fprintf(a.stderr, "  %-14s %s\n", "streams", what)
	a.printLeftOut(s)
	for _, m := range s.Stages {
		if m.BytesIn == 0 && m.BytesOut == 0 && m.Busy == 0 {
			continue
		}
		fmt.Fprintln(a.stderr, stageLine(m, s.Wall.Seconds(), s.Bottleneck))
	}
	fmt.Fprintf(a.stderr, "  %-14s peak %d of %d buffers, budget %s\n", "memory", s.Memory.PeakBuffers, s.Memory.Buffers, pipefile.HumanSize(s.Memory.Budget))
	a.printRetention(s)
}

// printLeftOut prints the streams a run did not move: skipped, left out
// of a restore, missing from the backup, damaged, failed.
func (a *app) printLeftOut(s runSummary) {
	if len(s.Skipped) > 0 {
		fmt.Fprintf(a.stderr, "  %-14s %s the sink does not restore, not read: %s\n", "skipped", plan.Plural(len(s.Skipped), "stream"), strings.Join(s.Skipped, ", "))
	}
	if len(s.Incomplete) > 0 {
		fmt.Fprintf(a.stderr, "  %-14s not restored, as part of each failed in the backup: %s\n", "incomplete", strings.Join(groups(s.Incomplete), ", "))
	}
	a.printFailedInBackup(s)
	if s.Damage != "" {
		fmt.Fprintf(a.stderr, "  %-14s stored and flagged: %s\n", "DAMAGED", s.Damage)
	}
	if len(s.Failed) > 0 {
		names := make([]string, len(s.Failed))
		for i, f := range s.Failed {
			names[i] = f.Stream
		}
		fmt.Fprintf(a.stderr, "  %-14s %d succeeded, %d failed: %s\n", "partial", s.Streams-len(s.Failed), len(s.Failed), strings.Join(groups(names), ", "))
	}
}

// printFailedInBackup prints, for a restore of a partial run, the streams
// that failed in the backup: those the restore asked for, and the others.
func (a *app) printFailedInBackup(s runSummary) {
	if len(s.FailedInBackup) == 0 {
		return
	}
	asked := map[string]bool{}
	for _, m := range s.Missing {
		asked[m] = true
	}
	var missing, other []string
	for _, f := range s.FailedInBackup {
		if asked[f.Stream] {
			missing = append(missing, f.Stream)
		} else {
			other = append(other, f.Stream)
		}
	}
	if len(missing) > 0 {
		fmt.Fprintf(a.stderr, "  %-14s asked for, not in the run (each failed in the backup): %s\n", "missing", strings.Join(groups(missing), ", "))
	}
	if len(other) > 0 {
		fmt.Fprintf(a.stderr, "  %-14s not asked for, and not in the run (each failed in the backup): %s\n", "not in run", strings.Join(groups(other), ", "))
	}
}

// stageLine is the summary's line of one stage (the source, a sink):
// its bytes, its rate over the run's wall seconds, how busy it was, and
// whether it was the bottleneck.
func stageLine(m engine.MeterReport, wall float64, bottleneck string) string {
	size := pipefile.HumanSize
	bytes := size(m.BytesIn)
	if m.Name == "source" {
		bytes = size(m.BytesOut) + " read"
	} else if m.BytesOut != m.BytesIn && !strings.HasPrefix(m.Name, "sink") {
		bytes = fmt.Sprintf("%s → %s", size(m.BytesIn), size(m.BytesOut))
	}
	rate := ""
	if wall > 0 {
		n := m.BytesIn
		if m.Name == "source" {
			n = m.BytesOut
		}
		rate = size(int64(float64(n)/wall)) + "/s"
	}
	mark := ""
	if m.Name == bottleneck {
		mark = "  ← bottleneck"
	}
	label := m.Name
	if m.Label != "" {
		label += " (" + m.Label + ")"
	}
	return fmt.Sprintf("  %-30s %-24s %12s  busy %3.0f%%%s", label, bytes, rate, 100*m.Utilization, mark)
}

// printRetention prints what retention did (its failures were warned of).
func (a *app) printRetention(s runSummary) {
	for _, r := range s.Retention {
		if r.Error != "" {
			continue // printed as a warning
		}
		fmt.Fprintf(a.stderr, "  %-14s sink %s: kept %s, deleted %s and %d leftover object(s) of failed runs\n", "retention", r.Sink,
			plan.Plural(len(r.Kept), "run"), plan.Plural(len(r.DeletedRuns), "run"), r.Garbage)
		if r.Packs > 0 {
			fmt.Fprintf(a.stderr, "  %-14s sink %s: deleted %s of chunks no run names\n", "retention", r.Sink, plan.Plural(r.Packs, "pack"))
		}
		for _, l := range r.Locked {
			fmt.Fprintf(a.stderr, "  %-14s sink %s: %s waits: the store locks it\n", "retention", r.Sink, l)
		}
	}
	if w := s.WALRetention; w != nil && w.Error == "" && len(w.Kept) > 0 {
		if w.Removed > 0 {
			fmt.Fprintf(a.stderr, "  %-14s removed %s\n", "wal retention", w.Describe(false))
		} else {
			fmt.Fprintf(a.stderr, "  %-14s %s\n", "wal retention", w.Describe(false))
		}
	}
}

// logFinished logs the end of a pipeline's run: at info when it succeeded,
// at error, with the error, when it failed.
func (a *app) logFinished(s runSummary) {
	attrs := []any{"pipeline", s.Pipeline, "run_id", s.RunID, "ok", s.OK, "duration_seconds", s.Seconds,
		"streams", s.Streams, "bytes_read", s.BytesRead, "bytes_written", s.BytesWritten, "bottleneck", s.Bottleneck,
		"peak_buffers", s.Memory.PeakBuffers, "memory_budget_bytes", s.Memory.Budget}
	if len(s.Manifests) > 0 {
		attrs = append(attrs, "manifests", s.Manifests)
	}
	if s.ManifestRead != "" {
		attrs = append(attrs, "manifest_read", s.ManifestRead)
	}
	if s.SignedBy != "" {
		attrs = append(attrs, "manifest_signed_by", s.SignedBy)
	}
	if !s.OK {
		a.log.Error("pipeline failed", append(attrs, "error", s.Error)...)
		return
	}
	a.log.Info("pipeline finished", attrs...)
}

// groups names streams by their group where several share one (a
// database read table by table: "shop/data/public/items.copy" is shop's),
// each group once with its count of streams, in order of first
// appearance.
func groups(streams []string) []string {
	var out []string
	count := map[string]int{}
	group := func(s string) string {
		if g, ok := sdk.StreamGroup(s); ok {
			return g
		}
		return s
	}
	for _, s := range streams {
		g := group(s)
		if count[g] == 0 {
			out = append(out, s)
		}
		count[g]++
	}
	for i, s := range out {
		if g := group(s); count[g] > 1 {
			out[i] = fmt.Sprintf("%s (%d streams)", g, count[g])
		}
	}
	return out
}
