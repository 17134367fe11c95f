package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Run is one execution of a Job.
type Run struct {
	job    *Job
	layout Layout

	source  *Meter
	checks  *Meter
	stages  []*Meter
	sinks   []*Meter
	srcPool *pool
	pools   []stagePools  // per stage; zero for Observers
	workers []*workerPool // per stage; nil unless a Mapper
	// srcLimit and sinkLimits cap the bytes per second of the source and
	// of each sink (nil: no limit).
	srcLimit   *throttle
	sinkLimits []*throttle

	results []StreamResult
	mu      sync.Mutex
	done    []committed // objects committed so far, for cleanup
}

type committed struct {
	sink int
	key  string
}

// New checks the job and lays out its buffers.
func New(job *Job) (*Run, error) {
	if err := job.validate(); err != nil {
		return nil, err
	}
	l, err := job.Layout()
	if err != nil {
		return nil, err
	}
	r := &Run{job: job, layout: l}
	// Per-stream positions work on up to Parallel streams at once.
	perStream := min(job.Parallel, max(1, len(job.Streams)))
	r.source = &Meter{Name: "source", Workers: perStream}
	r.checks = &Meter{Name: "verify", Workers: perStream}
	pos := l.Positions
	take := func() *pool {
		p := newPool(pos[0].Name, pos[0].Buffers, pos[0].BufferSize)
		pos = pos[1:]
		return p
	}
	r.srcPool = take()
	cur := job.ChunkSize
	for i := range job.Stages {
		s := &job.Stages[i]
		m := &Meter{Name: s.Name, Label: s.Label, Workers: perStream}
		var sp stagePools
		switch s.Proc.(type) {
		case Mapper:
			m.Workers = s.Workers
			sp.unit = cur
			if s.ChunkSize > 0 {
				sp.unit = s.ChunkSize
			}
			if s.cuts(cur) {
				sp.in = take()
			}
			sp.out = take()
			cur = sp.out.size
		case Streamer:
			sp.out = take()
			sp.unit = job.ChunkSize
			cur = job.ChunkSize
		}
		r.stages = append(r.stages, m)
		r.pools = append(r.pools, sp)
	}
	r.srcLimit = newThrottle(job.RateLimit)
	for _, s := range job.Sinks {
		r.sinks = append(r.sinks, &Meter{Name: "sink " + s.Name, Workers: perStream})
		r.sinkLimits = append(r.sinkLimits, newThrottle(s.RateLimit))
	}
	r.results = make([]StreamResult, len(job.Streams))
	return r, nil
}

// Layout returns the run's buffer layout and memory budget.
func (r *Run) Layout() Layout { return r.layout }

// Source returns the meter of the source, for live progress.
func (r *Run) Source() *Meter { return r.source }

// Meters returns every meter in pipeline order: source, stages, sinks.
func (r *Run) Meters() []*Meter {
	ms := []*Meter{r.source}
	if r.hasChecks() {
		ms = append(ms, r.checks)
	}
	ms = append(ms, r.stages...)
	return append(ms, r.sinks...)
}

func (r *Run) hasChecks() bool {
	for _, s := range r.job.Streams {
		if len(s.Checks) > 0 {
			return true
		}
	}
	return false
}

// Run moves every stream. It returns when all streams are committed and
// Job.Finish succeeded, or at the first error, after aborting what was in
// flight and removing the objects this run committed.
func (r *Run) Run(ctx context.Context) (*Result, error) {
	res := &Result{Started: time.Now(), Layout: r.layout}
	err := r.run(ctx, res)
	res.Finished = time.Now()
	wall := res.Finished.Sub(res.Started)
	for _, m := range r.Meters() {
		res.Meters = append(res.Meters, m.report(wall))
	}
	res.Bottleneck = bottleneck(res.Meters)
	res.PeakBuffers = r.peakBuffers()
	res.Streams = r.results
	return res, err
}

func (r *Run) run(ctx context.Context, res *Result) (err error) {
	for i := range r.job.Stages {
		if _, ok := r.job.Stages[i].Proc.(Mapper); !ok {
			r.workers = append(r.workers, nil)
			continue
		}
		wp, err := startWorkers(&r.job.Stages[i], r.stages[i])
		if err != nil {
			r.stopWorkers()
			return err
		}
		r.workers = append(r.workers, wp)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.takeBack(ctx))
		}
	}()

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(r.job.Parallel)
	var (
		mu     sync.Mutex
		failed []error // every stream's error, in the order they came
	)
	for i := range r.job.Streams {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error {
			if err := r.stream(gctx, i); err != nil {
				err = fmt.Errorf("stream %q: %w", r.job.Streams[i].Name, err)
				if r.job.Isolate && ctx.Err() == nil {
					r.results[i].Err = err
					return nil
				}
				mu.Lock()
				failed = append(failed, err)
				mu.Unlock()
				return err
			}
			return nil
		})
	}
	err = g.Wait()
	if err == nil && r.job.Isolate {
		err = ctx.Err()
	}
	r.stopWorkers()
	if err != nil {
		return withOthers(err, failed)
	}
	for i, s := range r.job.Sinks {
		if f, ok := s.Sink.(sdk.Flusher); ok {
			if err := f.Flush(ctx); err != nil {
				return fmt.Errorf("sink %s: flush: %w", r.job.Sinks[i].Name, err)
			}
		}
	}
	res.Streams = r.results
	if r.job.Finish != nil {
		return r.job.Finish(ctx, res)
	}
	return nil
}

// withOthers is the run's first error joined with the errors of other
// streams that are more than the cancellation it caused: a commit whose
// outcome the store could not tell, say, which must not go unsaid.
func withOthers(first error, all []error) error {
	out := []error{first}
	for _, e := range all {
		if errors.Is(e, first) || errors.Is(e, context.Canceled) {
			continue
		}
		out = append(out, e)
	}
	if len(out) == 1 {
		return first
	}
	return errors.Join(out...)
}

func (r *Run) stopWorkers() {
	for _, wp := range r.workers {
		if wp != nil {
			wp.stop()
		}
	}
}

// takeBack removes the objects a failed run committed.
func (r *Run) takeBack(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, c := range r.done {
		s := r.job.Sinks[c.sink]
		rm, ok := s.Sink.(sdk.Remover)
		if !ok {
			continue // a consumer (a command, a database) keeps what it took
		}
		if err := rm.Remove(ctx, c.key); err != nil {
			errs = append(errs, fmt.Errorf("sink %s: removing %q after the failure: %w", s.Name, c.key, err))
		}
	}
	r.done = nil
	return errors.Join(errs...)
}

func (r *Run) peakBuffers() int {
	n := r.srcPool.peak.Load()
	for _, p := range r.pools {
		if p.in != nil {
			n += p.in.peak.Load()
		}
		if p.out != nil {
			n += p.out.peak.Load()
		}
	}
	return int(n)
}

// buffersInUse reports the buffers currently taken from all pools.
func (r *Run) buffersInUse() int {
	n := r.srcPool.inUse.Load()
	for _, p := range r.pools {
		if p.in != nil {
			n += p.in.inUse.Load()
		}
		if p.out != nil {
			n += p.out.inUse.Load()
		}
	}
	return int(n)
}
