// Package metrics exports what `pipe run` does as Prometheus metrics: the
// bytes, chunks, time and failures of every position of each pipeline (the
// source, each stage, each sink), the buffers in use, the memory budget,
// how long each pipeline ran and whether it succeeded, and the retries of
// the plugins.
//
// A Metrics is a prometheus.Collector on a registry of its own (never the
// global one). It reads the engine's Meters when it is gathered, so a run
// pays nothing for it beyond the engine's atomic counters. The CLI serves
// it over HTTP during a run (Listen), writes it for node_exporter's
// textfile collector (WriteTextfile) and pushes it to a Pushgateway (Push)
// when the run ends.
//
// Every metric carries the label pipeline (a file may run several, in
// order); stage metrics carry stage, the position's meter name: "source",
// "verify", "compress", "encrypt", "checksum", "sink s3", "sink fs#2".
// Labels stay few and bounded: no run id, no object key.
package metrics

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/runner"
)

// Options configure a Metrics.
type Options struct {
	// Version is exported as pipe_info{version}.
	Version string
	// Labels are put on every metric (database="shop", say), for runs of
	// the same file that differ only by their variables. Push sends them
	// as the Pushgateway's grouping key instead.
	Labels map[string]string
}

// Metrics collects the metrics of the pipelines of one pipe invocation.
// Its methods are safe for concurrent use.
type Metrics struct {
	version string
	labels  map[string]string
	now     func() time.Time

	mu        sync.Mutex
	pipelines []*pipelineRun // in the order they began
	verifies  []*verifyRun   // pipe verify's checks, by store's pipeline
	retries   map[retryKey]float64
	// carried are last-success timestamps from an earlier run's textfile,
	// by pipeline, for pipelines that did not succeed in this one; and
	// those of pipe verify.
	carried       map[string]float64
	carriedVerify map[string]float64
	// wals are the WAL archives pipe wal pushed to, fetched from or
	// checked, by name; carriedPush the last push of each from a textfile.
	wals        map[string]*walArchive
	carriedPush map[string]float64
	// drills are pipe drill's, by restore pipeline; carriedDrill their
	// last successes from a textfile.
	drills       []*drillRun
	carriedDrill map[string]float64
	// binlogs are the running binlog archivers, by archive.
	binlogs map[string]BinlogStats

	reg  *prometheus.Registry // with Labels on every metric
	bare *prometheus.Registry // without: for the Pushgateway's grouping key
}

type retryKey struct{ pipeline, endpoint string }

// pipelineRun is one pipeline of the invocation.
type pipelineRun struct {
	name   string
	budget int64
	begun  time.Time

	run    *engine.Run // nil until the engine started
	stages []string    // label of each of run.Meters()
	total  int64       // source bytes, or -1

	finished  bool
	ended     time.Time
	ok        bool
	streams   int
	committed int
	failed    []string // streams that failed in a run whose streams stand alone
	damaged   bool     // stored, but the source found what it read damaged
}

// New returns a Metrics with its registries.
func New(o Options) *Metrics {
	m := &Metrics{version: o.Version, labels: map[string]string{}, now: time.Now, retries: map[retryKey]float64{}}
	for k, v := range o.Labels {
		m.labels[k] = v
	}
	if m.version == "" {
		m.version = "dev"
	}
	m.reg = prometheus.NewRegistry()
	m.reg.MustRegister(&collector{m: m, descs: newDescs(m.labels)})
	m.bare = prometheus.NewRegistry()
	m.bare.MustRegister(&collector{m: m, descs: newDescs(nil)})
	return m
}

// Gatherer returns the pipe_* metrics, with Options.Labels on each.
func (m *Metrics) Gatherer() prometheus.Gatherer { return m.reg }

// Begin records that a pipeline starts: before its plugins are configured,
// so a pipeline that fails before any byte moves still has a duration and
// an outcome. budget is its memory budget in bytes.
func (m *Metrics) Begin(pipeline string, budget int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pipeline(pipeline)
	*p = pipelineRun{name: pipeline, budget: budget, begun: m.now(), total: -1}
}

// Start is runner.Progress's: the engine is about to move the pipeline's
// streams; total is the bytes the source will yield, or -1.
func (m *Metrics) Start(pipeline string, total int64, r *engine.Run) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pipeline(pipeline)
	if p.begun.IsZero() {
		p.begun, p.total = m.now(), -1
	}
	p.run, p.total = r, total
	p.stages = stageNames(r.Meters())
}

// Stop is runner.Progress's; Finish records the outcome.
func (m *Metrics) Stop() {}

// Finish records how a pipeline ended: rep and err as runner.Run returned
// them.
func (m *Metrics) Finish(pipeline string, rep *runner.Report, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p := m.pipeline(pipeline)
	if p.begun.IsZero() {
		p.begun = m.now()
	}
	p.finished, p.ended, p.ok = true, m.now(), err == nil
	if rep != nil {
		p.streams = rep.Streams
		p.failed = nil
		for _, f := range rep.Failed {
			p.failed = append(p.failed, f.Stream)
		}
		p.damaged = rep.Damage != ""
		if p.budget == 0 {
			p.budget = rep.Budget
		}
		if rep.Result != nil {
			p.committed = 0
			for _, s := range rep.Result.Streams {
				if s.Committed {
					p.committed++
				}
			}
		}
	}
}

// verifyRun is one pipe verify of a store's runs.
type verifyRun struct {
	pipeline           string
	started, ended     time.Time
	ok                 bool
	runs, objects, bad int
	bytes              int64
}

// Verified records what pipe verify found in the store of pipeline:
// runs and objects checked, the bad ones, the bytes read, and whether all
// were good (failed: verify itself failed, err).
func (m *Metrics) Verified(pipeline string, started, ended time.Time, runs, objects, bad int, bytes int64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.verifies = append(m.verifies, &verifyRun{pipeline: pipeline, started: started, ended: ended, ok: ok, runs: runs, objects: objects, bad: bad, bytes: bytes})
}

// Retried counts one retry of a request to an endpoint ("s3", "sink
// s3#2", "source postgres") of a pipeline: plugins retry on their own and
// report it in their logs, which the host routes here.
func (m *Metrics) Retried(pipeline, endpoint string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.retries[retryKey{pipeline, endpoint}]++
}

// Failed reports whether a pipeline that finished failed.
func (m *Metrics) Failed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.pipelines {
		if p.finished && !p.ok {
			return true
		}
	}
	return false
}

// pipeline returns the entry of name, adding it; m.mu is held. A pipeline
// run twice (--pipeline a --pipeline a) keeps one entry: the latest run.
func (m *Metrics) pipeline(name string) *pipelineRun {
	for _, p := range m.pipelines {
		if p.name == name {
			return p
		}
	}
	p := &pipelineRun{name: name, total: -1}
	m.pipelines = append(m.pipelines, p)
	return p
}

// stageNames returns the stage label of each meter: its name, made unique
// with #2, #3 … should two positions share one (the registry refuses two
// series with the same labels).
func stageNames(ms []*engine.Meter) []string {
	seen := map[string]int{}
	out := make([]string, len(ms))
	for i, mt := range ms {
		name := mt.Name
		seen[name]++
		if n := seen[name]; n > 1 {
			name = fmt.Sprintf("%s#%d", name, n)
		}
		out[i] = name
	}
	return out
}

// descs are the metrics' descriptions, with a set of constant labels.
type descs struct {
	info                                                                *prometheus.Desc
	bytes, chunks, busy, waiting, blocked, errs                         *prometheus.Desc
	workers                                                             *prometheus.Desc
	buffers, buffersInUse, buffersPeak, budget                          *prometheus.Desc
	sourceSize, started, duration, finished                             *prometheus.Desc
	success, lastSuccess, streams, streamsCommit, streamFailed, damaged *prometheus.Desc
	retries                                                             *prometheus.Desc
	verifyObjects, verifyBytes, verifyFailures                          *prometheus.Desc
	verifyRuns, verifySuccess, verifyDuration                           *prometheus.Desc
	verifyFinished, verifyLastSuccess                                   *prometheus.Desc
	wal                                                                 *walDescs
	drill                                                               *drillDescs
	binlog                                                              *binlogDescs
}

func newDescs(constLabels map[string]string) *descs {
	c := prometheus.Labels(constLabels)
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, c)
	}
	pl := []string{"pipeline"}
	st := []string{"pipeline", "stage"}
	return &descs{
		info:          d("pipe_info", "Always 1: the version of pipe that ran.", "version"),
		bytes:         d("pipe_stage_bytes_total", "Bytes a position consumed (direction=\"in\": stages and sinks) or produced (direction=\"out\": the source and stages).", "pipeline", "stage", "direction"),
		chunks:        d("pipe_stage_chunks_total", "Chunks that arrived at a position; for the source, the chunks it read.", st...),
		busy:          d("pipe_stage_busy_seconds_total", "Time a position's goroutines spent working, summed over its workers and streams. A streaming stage (encrypt, gzip) adds its times when each stream ends.", st...),
		waiting:       d("pipe_stage_waiting_seconds_total", "Time a position spent waiting for input from the position before it.", st...),
		blocked:       d("pipe_stage_blocked_seconds_total", "Time a position spent waiting for a free buffer or for the next position to take its output (backpressure, rate limits).", st...),
		errs:          d("pipe_stage_errors_total", "Failures that started at a position (a stream's first error, not the cancellations it caused).", st...),
		workers:       d("pipe_stage_workers", "Goroutines of a position: a chunk-parallel stage's workers, else the streams that run at once.", st...),
		buffers:       d("pipe_buffers", "Chunk buffers of the run's memory budget.", pl...),
		buffersInUse:  d("pipe_buffers_in_use", "Chunk buffers holding data now.", pl...),
		buffersPeak:   d("pipe_buffers_peak", "Most chunk buffers in use at once so far.", pl...),
		budget:        d("pipe_memory_budget_bytes", "The pipeline's memory budget: chunk buffers, stage state and sink buffers (pipe plan prints its parts).", pl...),
		sourceSize:    d("pipe_source_size_bytes", "Bytes the source will yield, when it said so before the run (files, objects); absent for a command's output.", pl...),
		started:       d("pipe_run_started_timestamp_seconds", "When the pipeline started, in seconds since the Unix epoch.", pl...),
		duration:      d("pipe_run_duration_seconds", "How long the pipeline has run, or ran: from configuring its plugins to its manifest and retention.", pl...),
		finished:      d("pipe_run_finished_timestamp_seconds", "When the pipeline ended, successfully or not; absent while it runs.", pl...),
		success:       d("pipe_run_success", "1 if the pipeline succeeded, 0 if it failed or was interrupted; absent while it runs.", pl...),
		lastSuccess:   d("pipe_run_last_success_timestamp_seconds", "When the pipeline last succeeded; a textfile keeps the previous value across failed runs, and a failed run's push leaves the Pushgateway's in place.", pl...),
		streams:       d("pipe_run_streams", "Streams the pipeline planned to move; set when it ends.", pl...),
		streamsCommit: d("pipe_run_streams_committed", "Streams whose objects were committed; set when the pipeline ends.", pl...),
		streamFailed:  d("pipe_run_stream_failed", "1 for each stream that failed in a run whose other streams were stored (a cluster's database); set when the pipeline ends.", "pipeline", "stream"),
		damaged:       d("pipe_run_damaged", "1 if the run was stored although its source found what it read damaged (a PostgreSQL page whose checksum failed), else 0; set when the pipeline ends.", pl...),
		retries:       d("pipe_retries_total", "Requests a plugin retried, by pipeline and endpoint.", "pipeline", "endpoint"),

		verifyObjects:     d("pipe_verify_objects_total", "Objects pipe verify checked in the store of a pipeline, by result (ok, bad).", "pipeline", "result"),
		verifyBytes:       d("pipe_verify_bytes_total", "Stored bytes pipe verify read and found good.", pl...),
		verifyFailures:    d("pipe_verify_failures_total", "Bad objects pipe verify found (missing, truncated, changed, undecodable).", pl...),
		verifyRuns:        d("pipe_verify_runs_total", "Runs pipe verify checked.", pl...),
		verifySuccess:     d("pipe_verify_success", "1 if every object pipe verify checked was good, 0 if one was bad or verify failed.", pl...),
		verifyDuration:    d("pipe_verify_duration_seconds", "How long pipe verify took.", pl...),
		verifyFinished:    d("pipe_verify_finished_timestamp_seconds", "When pipe verify ended, in seconds since the Unix epoch.", pl...),
		verifyLastSuccess: d("pipe_verify_last_success_timestamp_seconds", "When pipe verify last found every object it checked good; a textfile keeps the previous value across failed checks.", pl...),
		wal:               newWALDescs(d),
		drill:             newDrillDescs(d),
		binlog:            newBinlogDescs(d),
	}
}

func (d *descs) all() []*prometheus.Desc {
	return append([]*prometheus.Desc{d.info, d.bytes, d.chunks, d.busy, d.waiting, d.blocked, d.errs, d.workers,
		d.buffers, d.buffersInUse, d.buffersPeak, d.budget, d.sourceSize, d.started, d.duration, d.finished,
		d.success, d.lastSuccess, d.streams, d.streamsCommit, d.streamFailed, d.damaged, d.retries,
		d.verifyObjects, d.verifyBytes, d.verifyFailures, d.verifyRuns, d.verifySuccess, d.verifyDuration, d.verifyFinished, d.verifyLastSuccess},
		append(append(d.wal.all(), d.drill.all()...), d.binlog.all()...)...)
}

// collector reads a Metrics when gathered.
type collector struct {
	m     *Metrics
	descs *descs
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs.all() {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	m, d := c.m, c.descs
	counter := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	gauge(d.info, 1, m.version)
	succeeded := map[string]bool{}
	for _, p := range m.pipelines {
		if p.collect(d, now, counter, gauge) {
			succeeded[p.name] = true
		}
	}
	for name, ts := range m.carried {
		if !succeeded[name] {
			gauge(d.lastSuccess, ts, name)
		}
	}
	for k, n := range m.retries {
		counter(d.retries, n, k.pipeline, k.endpoint)
	}
	m.collectVerify(d, counter, gauge)
	m.collectWAL(d.wal, now, counter, gauge)
	m.collectDrills(d.drill, gauge)
	m.collectBinlogs(d.binlog, counter, gauge)
}

// collect emits the metrics of one pipeline, as of now, and reports
// whether it succeeded.
func (p *pipelineRun) collect(d *descs, now time.Time, counter, gauge func(*prometheus.Desc, float64, ...string)) bool {
	name := p.name
	if p.run != nil {
		p.collectEngine(d, counter, gauge)
	}
	if p.budget > 0 {
		gauge(d.budget, float64(p.budget), name)
	}
	if !p.begun.IsZero() {
		gauge(d.started, seconds(p.begun), name)
		end := now
		if p.finished {
			end = p.ended
		}
		gauge(d.duration, end.Sub(p.begun).Seconds(), name)
	}
	if p.finished {
		gauge(d.finished, seconds(p.ended), name)
		gauge(d.success, b2f(p.ok), name)
		gauge(d.streams, float64(p.streams), name)
		gauge(d.streamsCommit, float64(p.committed), name)
		for _, s := range p.failed {
			gauge(d.streamFailed, 1, name, s)
		}
		gauge(d.damaged, b2f(p.damaged), name)
		if p.ok {
			gauge(d.lastSuccess, seconds(p.ended), name)
			return true
		}
	}
	return false
}

// collectEngine emits what the engine's meters and buffers of a running
// or ended pipeline say.
func (p *pipelineRun) collectEngine(d *descs, counter, gauge func(*prometheus.Desc, float64, ...string)) {
	name := p.name
	for i, mt := range p.run.Meters() {
		stage := p.stages[i]
		if stage != "source" {
			counter(d.bytes, float64(mt.BytesIn()), name, stage, "in")
		}
		if !strings.HasPrefix(stage, "sink ") {
			counter(d.bytes, float64(mt.BytesOut()), name, stage, "out")
		}
		counter(d.chunks, float64(mt.Chunks()), name, stage)
		counter(d.busy, mt.Busy().Seconds(), name, stage)
		counter(d.waiting, mt.WaitIn().Seconds(), name, stage)
		counter(d.blocked, mt.Blocked().Seconds(), name, stage)
		counter(d.errs, float64(mt.Errors()), name, stage)
		gauge(d.workers, float64(mt.Workers), name, stage)
	}
	gauge(d.buffers, float64(p.run.Layout().Buffers), name)
	gauge(d.buffersInUse, float64(p.run.BuffersInUse()), name)
	gauge(d.buffersPeak, float64(p.run.PeakBuffers()), name)
	if p.total >= 0 {
		gauge(d.sourceSize, float64(p.total), name)
	}
}

// collectVerify emits the metrics of pipe verify's checks, and the last
// successes carried from an earlier textfile for the pipelines no check
// of this invocation found good.
func (m *Metrics) collectVerify(d *descs, counter, gauge func(*prometheus.Desc, float64, ...string)) {
	verified := map[string]bool{}
	for _, v := range m.verifies {
		counter(d.verifyObjects, float64(v.objects-v.bad), v.pipeline, "ok")
		counter(d.verifyObjects, float64(v.bad), v.pipeline, "bad")
		counter(d.verifyBytes, float64(v.bytes), v.pipeline)
		counter(d.verifyFailures, float64(v.bad), v.pipeline)
		counter(d.verifyRuns, float64(v.runs), v.pipeline)
		gauge(d.verifySuccess, b2f(v.ok), v.pipeline)
		gauge(d.verifyDuration, v.ended.Sub(v.started).Seconds(), v.pipeline)
		gauge(d.verifyFinished, seconds(v.ended), v.pipeline)
		if v.ok {
			gauge(d.verifyLastSuccess, seconds(v.ended), v.pipeline)
			verified[v.pipeline] = true
		}
	}
	for name, ts := range m.carriedVerify {
		if !verified[name] {
			gauge(d.verifyLastSuccess, ts, name)
		}
	}
}

func seconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
