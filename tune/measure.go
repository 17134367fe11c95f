package tune

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/runner"
)

// Row is what one variant measured.
type Row struct {
	Variant
	Seconds float64 `json:"seconds"`
	// Runs is how many runs the variant made; the row adds them up.
	Runs int `json:"runs"`
	// Cut is true when --duration stopped the variant before its input
	// ended.
	Cut          bool    `json:"cut"`
	ReadBytes    int64   `json:"read_bytes"`
	StoredBytes  int64   `json:"stored_bytes"`
	ReadPerSec   float64 `json:"read_bytes_per_sec"`
	StoredPerSec float64 `json:"stored_bytes_per_sec"`
	Bottleneck   string  `json:"bottleneck"`
	// Budget is the plan's memory budget; PeakRSS the peak resident memory
	// of pipe and its plugin processes during the variant (-1: unknown).
	Budget      int64   `json:"memory_budget_bytes"`
	PeakRSS     int64   `json:"peak_rss_bytes"`
	PeakBuffers int     `json:"peak_buffers"`
	Buffers     int     `json:"buffers"`
	Stages      []Stage `json:"stages"`
}

// Stage is one position of a variant's run.
type Stage struct {
	Name    string `json:"name"`
	Label   string `json:"label,omitempty"`
	Workers int    `json:"workers"`
	// Bytes is what the position read (the source: what it yielded).
	Bytes       int64   `json:"bytes"`
	PerSec      float64 `json:"bytes_per_sec"`
	Utilization float64 `json:"utilization"`
}

// Errors of Trials.Measure besides those of Plan, for the CLI to word.
var (
	// ErrInterrupted: the caller's context ended (a signal); what the
	// variant wrote was taken back.
	ErrInterrupted = errors.New("the bench stopped")
	// ErrNothingMoved: --duration ended before the first run moved any
	// data (configuring the endpoints took that long).
	ErrNothingMoved = errors.New("--duration ended before the run moved any data")
)

// RunError is a trial run that failed: Err is the runner's error (a
// *runner.DiagError, or one to scrub of Planned's secrets).
type RunError struct {
	Planned *Planned
	Err     error
}

func (e *RunError) Error() string { return e.Err.Error() }
func (e *RunError) Unwrap() error { return e.Err }

// errCut is the cause of a variant's context when --duration ends it.
var errCut = errors.New("cut by the bench's --duration")

// maxRuns bounds the runs of a variant whose input is short.
const maxRuns = 3

// Trials make and measure a variant's trial runs.
type Trials struct {
	// Duration is the longest time per variant (--duration).
	Duration time.Duration
	// RunID returns a fresh run ID.
	RunID func() string
	// Plan loads and plans the pipeline for v with run ID runID; its
	// error (diagnostics already shown) is returned as it is.
	Plan func(runID string, v Variant) (*Planned, error)
	// Options are the runner's options for a trial run of p: the registry,
	// warnings, a generated source. RunID and Trial are set here.
	Options func(p *Planned) runner.Options
}

// Measure measures one variant: a trial run until its input ends or
// Duration passes. While another run fits in what is left of Duration
// (up to maxRuns), the variant runs again, and is measured over all its
// runs: short inputs are noisy (cold caches, other processes). A repeat
// that Duration cuts after all is dropped.
func (t *Trials) Measure(ctx context.Context, v Variant) (Row, error) {
	deadline := time.Now().Add(t.Duration)
	var (
		runs []trial
		p    *Planned
		cut  bool
	)
	peak := int64(-1)
	for len(runs) < maxRuns {
		runID := t.RunID()
		var err error
		if p, err = t.Plan(runID, v); err != nil {
			return Row{}, err
		}
		ro := t.Options(p)
		ro.RunID, ro.Trial = runID, true
		runner.SetMemoryLimit(p.Pipeline)
		resetPeakRSS()
		vctx, cancel := context.WithDeadlineCause(ctx, deadline, errCut)
		start := time.Now()
		r, err := runner.Run(vctx, p.Pipeline, ro)
		took := time.Since(start)
		cut = err != nil && ctx.Err() == nil && context.Cause(vctx) == errCut
		cancel()
		switch {
		case ctx.Err() != nil:
			return Row{}, ErrInterrupted
		case cut && len(runs) > 0:
			// A repeat that did not fit after all.
			return measure(v, p.Budget(), runs, false).withPeak(peak), nil
		case cut && (r == nil || r.Result == nil):
			return Row{}, ErrNothingMoved
		case err != nil && !cut:
			return Row{}, &RunError{Planned: p, Err: err}
		}
		runs = append(runs, trial{res: r.Result, wall: runWall(r.Result, cut, deadline)})
		peak = max(peak, peakRSS())
		if cut || time.Now().Add(took).After(deadline) {
			break
		}
	}
	return measure(v, p.Budget(), runs, cut).withPeak(peak), nil
}

func (r Row) withPeak(peak int64) Row {
	r.PeakRSS = peak
	return r
}

// trial is one run of a variant: its result and the time it is measured
// over.
type trial struct {
	res  *engine.Result
	wall time.Duration
}

// runWall is the time a run is measured over: up to the moment --duration
// cut it, or up to its end (the take-back of its objects included, which is
// quick next to moving them).
func runWall(res *engine.Result, cut bool, cutAt time.Time) time.Duration {
	end := res.Finished
	if cut && cutAt.Before(end) {
		end = cutAt
	}
	return end.Sub(res.Started)
}

// measure turns a variant's runs into a row: bytes, busy times and wall
// times add up over the runs, so a variant that ran more often is not
// favoured, only measured more precisely.
func measure(v Variant, budget int64, runs []trial, cut bool) Row {
	row := Row{Variant: v, Runs: len(runs), Cut: cut, Budget: budget}
	var wall time.Duration
	type sum struct {
		engine.MeterReport
		bytes int64
	}
	var sums []sum
	for _, r := range runs {
		wall += r.wall
		row.PeakBuffers = max(row.PeakBuffers, r.res.PeakBuffers)
		row.Buffers = r.res.Layout.Buffers
		for i, m := range r.res.Meters {
			if i == len(sums) {
				sums = append(sums, sum{MeterReport: engine.MeterReport{Name: m.Name, Label: m.Label, Workers: m.Workers}})
			}
			n := m.BytesIn
			if m.Name == "source" {
				n = m.BytesOut
			}
			sums[i].bytes += n
			sums[i].Busy += m.Busy
		}
	}
	row.Seconds = wall.Seconds()
	best := -1.0
	for _, m := range sums {
		st := Stage{Name: m.Name, Label: m.Label, Workers: m.Workers, Bytes: m.bytes}
		switch {
		case m.Name == "source":
			row.ReadBytes = m.bytes
		case strings.HasPrefix(m.Name, "sink ") && row.StoredBytes == 0:
			row.StoredBytes = m.bytes
		}
		if wall > 0 {
			st.PerSec = float64(st.Bytes) / wall.Seconds()
			st.Utilization = min(1, float64(m.Busy)/(float64(wall)*float64(max(1, m.Workers))))
		}
		if st.Utilization > best {
			best, row.Bottleneck = st.Utilization, m.Name
		}
		row.Stages = append(row.Stages, st)
	}
	if wall > 0 {
		row.ReadPerSec = float64(row.ReadBytes) / wall.Seconds()
		row.StoredPerSec = float64(row.StoredBytes) / wall.Seconds()
	}
	return row
}
