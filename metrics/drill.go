package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// drillRun is one pipe drill: a run restored through pipeline into a
// scratch server, then checked.
type drillRun struct {
	pipeline                 string
	started, restored, ended time.Time
	checks, failed           int
	ok                       bool
}

type drillDescs struct {
	success, restore, duration, finished, lastSuccess, checks, failed *prometheus.Desc
}

func newDrillDescs(d func(name, help string, labels ...string) *prometheus.Desc) *drillDescs {
	pl := "pipeline"
	return &drillDescs{
		success:     d("pipe_drill_success", "1 if pipe drill restored a run through the pipeline and every check passed, else 0.", pl),
		restore:     d("pipe_drill_restore_seconds", "How long the drill's restore took, from the scratch server's start to the restore's end.", pl),
		duration:    d("pipe_drill_duration_seconds", "How long the whole drill took: the scratch server, the restore and the checks.", pl),
		finished:    d("pipe_drill_finished_timestamp_seconds", "When pipe drill ended, in seconds since the Unix epoch.", pl),
		lastSuccess: d("pipe_drill_last_success_timestamp_seconds", "When a drill through the pipeline last passed; a textfile keeps the previous value across failed drills.", pl),
		checks:      d("pipe_drill_checks", "Checks the drill ran (amcheck counts as one).", pl),
		failed:      d("pipe_drill_checks_failed", "Checks of the drill that failed.", pl),
	}
}

func (d *drillDescs) all() []*prometheus.Desc {
	return []*prometheus.Desc{d.success, d.restore, d.duration, d.finished, d.lastSuccess, d.checks, d.failed}
}

// Drilled records a pipe drill through pipeline: when it started, when the
// restore ended, when the checks ended, how many checks ran and failed,
// and whether it passed.
func (m *Metrics) Drilled(pipeline string, started, restored, ended time.Time, checks, failed int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.drills = append(m.drills, &drillRun{pipeline: pipeline, started: started, restored: restored, ended: ended, checks: checks, failed: failed, ok: ok})
}

// collectDrills sends the drills' metrics; m.mu is held.
func (m *Metrics) collectDrills(d *drillDescs, gauge func(*prometheus.Desc, float64, ...string)) {
	passed := map[string]bool{}
	for _, r := range m.drills {
		gauge(d.success, b2f(r.ok), r.pipeline)
		if !r.restored.IsZero() {
			gauge(d.restore, r.restored.Sub(r.started).Seconds(), r.pipeline)
		}
		gauge(d.duration, r.ended.Sub(r.started).Seconds(), r.pipeline)
		gauge(d.finished, seconds(r.ended), r.pipeline)
		gauge(d.checks, float64(r.checks), r.pipeline)
		gauge(d.failed, float64(r.failed), r.pipeline)
		if r.ok {
			gauge(d.lastSuccess, seconds(r.ended), r.pipeline)
			passed[r.pipeline] = true
		}
	}
	for name, ts := range m.carriedDrill {
		if !passed[name] {
			gauge(d.lastSuccess, ts, name)
		}
	}
}
