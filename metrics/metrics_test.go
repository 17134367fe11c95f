package metrics_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/engine/enginetest"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/metrics"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
)

const chunk = 64 << 10

// sizes of the source's files: several chunks, less than one, none.
var sizes = map[string]int{"a.bin": 5*chunk + 123, "b.bin": 7000, "c.bin": 0}

// runFile loads src and runs each of its pipelines as `pipe run` does,
// with m seeing them; it returns the plan and each pipeline's report and
// error.
func runFile(t *testing.T, m *metrics.Metrics, src string) (*plan.Plan, map[string]*runner.Report, map[string]error) {
	t.Helper()
	reg, err := host.NewRegistry(all.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	runID := fmt.Sprintf("run-%d", time.Now().UnixNano())
	f, diags := pipefile.LoadSource("test.hcl", []byte(src), pipefile.Options{RunID: runID, Schemas: reg})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	pl, diags := plan.New(f, plan.Options{Host: profiles.Host{CPUs: 2, Memory: 8 << 30}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	reps, errs := map[string]*runner.Report{}, map[string]error{}
	for _, p := range pl.Pipelines {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		m.Begin(p.Name, p.Budget())
		rep, err := runner.Run(ctx, p, runner.Options{RunID: runID, Registry: reg, Progress: m})
		cancel()
		m.Finish(p.Name, rep, err)
		reps[p.Name], errs[p.Name] = rep, err
	}
	return pl, reps, errs
}

// sample is one series: its labels without the constant ones, and value.
type sample struct {
	labels map[string]string
	value  float64
}

// gather decodes what g exposes in the text format, as a scrape would,
// by metric name.
func gather(t *testing.T, g prometheus.Gatherer) map[string][]sample {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return parse(t, b.String())
}

func parse(t *testing.T, text string) map[string][]sample {
	t.Helper()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the metrics do not parse: %v\n%s", err, text)
	}
	return families(mfs)
}

func families(mfs map[string]*dto.MetricFamily) map[string][]sample {
	out := map[string][]sample{}
	for name, mf := range mfs {
		for _, m := range mf.GetMetric() {
			s := sample{labels: map[string]string{}}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				s.value = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				s.value = m.GetGauge().GetValue()
			case m.GetUntyped() != nil:
				s.value = m.GetUntyped().GetValue()
			}
			out[name] = append(out[name], s)
		}
	}
	return out
}

// value returns the one series of name whose labels include want.
func value(t *testing.T, ms map[string][]sample, name string, want ...string) float64 {
	t.Helper()
	v, ok := lookup(ms, name, want...)
	if !ok {
		t.Fatalf("no series %s%v among %v", name, want, ms[name])
	}
	return v
}

func lookup(ms map[string][]sample, name string, want ...string) (float64, bool) {
	var found []float64
	for _, s := range ms[name] {
		match := true
		for i := 0; i+1 < len(want); i += 2 {
			if s.labels[want[i]] != want[i+1] {
				match = false
			}
		}
		if match {
			found = append(found, s.value)
		}
	}
	if len(found) != 1 {
		return 0, false
	}
	return found[0], true
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func writeSource(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, n := range sizes {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i * 7 % 251)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The metrics of a real run equal what the engine counted: bytes, times
// and buffers against its report, chunks against the source's sizes.
func TestRunMetrics(t *testing.T) {
	in := writeSource(t)
	out := t.TempDir()
	m := metrics.New(metrics.Options{Version: "1.2.3", Labels: map[string]string{"database": "shop"}})
	pl, reps, errs := runFile(t, m, fmt.Sprintf(`
pipeline "backup" {
  chunk_size = "64KiB"
  source "fs" { path = %q }
  compress { workers = 2 }
  checksum {}
  sink "fs" { path = "%s/one/" }
  sink "fs" { path = "%s/two/" }
}`, in, out, out))
	if err := errs["backup"]; err != nil {
		t.Fatal(err)
	}
	rep := reps["backup"]
	ms := gather(t, m.Gatherer())

	// Every series carries the constant label.
	for name, ss := range ms {
		for _, s := range ss {
			if s.labels["database"] != "shop" {
				t.Errorf("%s%v lacks database=\"shop\"", name, s.labels)
			}
		}
	}
	if v := value(t, ms, "pipe_info", "version", "1.2.3"); v != 1 {
		t.Errorf("pipe_info = %v", v)
	}

	var wantChunks, total float64
	for _, n := range sizes {
		wantChunks += math.Max(1, math.Ceil(float64(n)/chunk))
		total += float64(n)
	}
	var stages []string
	for _, r := range rep.Result.Meters {
		stages = append(stages, r.Name)
		l := []string{"pipeline", "backup", "stage", r.Name}
		if r.Name != "source" {
			if got := value(t, ms, "pipe_stage_bytes_total", append(l, "direction", "in")...); got != float64(r.BytesIn) {
				t.Errorf("%s: bytes in %v, the engine counted %d", r.Name, got, r.BytesIn)
			}
		}
		if !strings.HasPrefix(r.Name, "sink ") {
			if got := value(t, ms, "pipe_stage_bytes_total", append(l, "direction", "out")...); got != float64(r.BytesOut) {
				t.Errorf("%s: bytes out %v, the engine counted %d", r.Name, got, r.BytesOut)
			}
		}
		for name, want := range map[string]time.Duration{
			"pipe_stage_busy_seconds_total":    r.Busy,
			"pipe_stage_waiting_seconds_total": r.WaitIn,
			"pipe_stage_blocked_seconds_total": r.BlockedOut,
		} {
			if got := value(t, ms, name, l...); !near(got, want.Seconds()) {
				t.Errorf("%s %s = %v, the engine counted %v", name, r.Name, got, want)
			}
		}
		if got := value(t, ms, "pipe_stage_workers", l...); got != float64(r.Workers) {
			t.Errorf("%s: workers %v, want %d", r.Name, got, r.Workers)
		}
		// Every position sees each chunk the source read: compress works
		// on chunks of the source's size, and the rest pass them on.
		if got := value(t, ms, "pipe_stage_chunks_total", l...); got != wantChunks {
			t.Errorf("%s: %v chunks, want %v", r.Name, got, wantChunks)
		}
		if got := value(t, ms, "pipe_stage_errors_total", l...); got != 0 {
			t.Errorf("%s: %v errors in a run that succeeded", r.Name, got)
		}
	}
	if want := "source compress checksum sink fs#1 sink fs#2"; strings.Join(stages, " ") != want {
		t.Errorf("stages %q, want %q", stages, want)
	}
	if got := value(t, ms, "pipe_stage_bytes_total", "stage", "source", "direction", "out"); got != total {
		t.Errorf("source read %v bytes, the files hold %v", got, total)
	}

	p := pl.Pipelines[0]
	for name, want := range map[string]float64{
		"pipe_run_success":           1,
		"pipe_run_streams":           3,
		"pipe_run_streams_committed": 3,
		"pipe_buffers":               float64(rep.Result.Layout.Buffers),
		"pipe_buffers_in_use":        0,
		"pipe_buffers_peak":          float64(rep.Result.PeakBuffers),
		"pipe_memory_budget_bytes":   float64(p.Budget()),
		"pipe_source_size_bytes":     total,
	} {
		if got := value(t, ms, name, "pipeline", "backup"); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	started := value(t, ms, "pipe_run_started_timestamp_seconds", "pipeline", "backup")
	finished := value(t, ms, "pipe_run_finished_timestamp_seconds", "pipeline", "backup")
	duration := value(t, ms, "pipe_run_duration_seconds", "pipeline", "backup")
	if math.Abs(finished-started-duration) > 1e-3 || duration <= 0 || duration > rep.Result.Finished.Sub(rep.Result.Started).Seconds()+120 {
		t.Errorf("started %v, finished %v, duration %v", started, finished, duration)
	}
	if engine := rep.Result.Finished.Sub(rep.Result.Started).Seconds(); duration < engine {
		t.Errorf("duration %v is shorter than the engine's run alone (%v)", duration, engine)
	}
	if got := value(t, ms, "pipe_run_last_success_timestamp_seconds", "pipeline", "backup"); got != finished {
		t.Errorf("last success %v, finished %v", got, finished)
	}
	if _, ok := ms["pipe_retries_total"]; ok {
		t.Errorf("retries in a run without any: %v", ms["pipe_retries_total"])
	}

	// The names and help follow Prometheus' conventions.
	problems, err := testutil.GatherAndLint(m.Gatherer())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}

// A position that fails counts one error, the positions its failure
// cancelled none; a pipeline that fails before the engine starts still
// has an outcome and a duration.
func TestFailedRun(t *testing.T) {
	out := t.TempDir()
	m := metrics.New(metrics.Options{})
	_, _, errs := runFile(t, m, fmt.Sprintf(`
pipeline "dump" {
  chunk_size = "64KiB"
  source "exec" {
    command = ["sh", "-c", "head -c 300000 /dev/zero; exit 3"]
    name    = "dump"
  }
  compress {}
  sink "fs" { path = "%[1]s/" }
}
pipeline "nothing" {
  source "fs" { path = "%[1]s/does-not-exist" }
  sink "fs" { path = "%[1]s/copy/" }
}`, out))
	if errs["dump"] == nil || errs["nothing"] == nil {
		t.Fatalf("both pipelines should fail: %v", errs)
	}
	ms := gather(t, m.Gatherer())
	for _, stage := range []string{"source", "compress", "sink fs"} {
		want := 0.0
		if stage == "source" {
			want = 1
		}
		if got := value(t, ms, "pipe_stage_errors_total", "pipeline", "dump", "stage", stage); got != want {
			t.Errorf("%s: %v errors, want %v (%v)", stage, got, want, errs["dump"])
		}
	}
	for _, p := range []string{"dump", "nothing"} {
		if got := value(t, ms, "pipe_run_success", "pipeline", p); got != 0 {
			t.Errorf("%s: success %v", p, got)
		}
		if _, ok := lookup(ms, "pipe_run_last_success_timestamp_seconds", "pipeline", p); ok {
			t.Errorf("%s: a last success without one", p)
		}
		if got := value(t, ms, "pipe_run_duration_seconds", "pipeline", p); got <= 0 {
			t.Errorf("%s: duration %v", p, got)
		}
	}
	if got := value(t, ms, "pipe_run_streams_committed", "pipeline", "dump"); got != 0 {
		t.Errorf("dump: %v streams committed", got)
	}
	if _, ok := lookup(ms, "pipe_stage_bytes_total", "pipeline", "nothing"); ok {
		t.Errorf("stage metrics for a pipeline whose engine never started")
	}
	if !m.Failed() {
		t.Errorf("Failed() = false")
	}
}

func TestRetried(t *testing.T) {
	m := metrics.New(metrics.Options{})
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.Retried("backup", "sink s3")
		}()
	}
	wg.Wait()
	m.Retried("backup", "source postgres")
	ms := gather(t, m.Gatherer())
	if got := value(t, ms, "pipe_retries_total", "pipeline", "backup", "endpoint", "sink s3"); got != 10 {
		t.Errorf("sink s3: %v retries, want 10", got)
	}
	if got := value(t, ms, "pipe_retries_total", "pipeline", "backup", "endpoint", "source postgres"); got != 1 {
		t.Errorf("source postgres: %v retries, want 1", got)
	}
}

// While the engine runs, a gather sees its counters move: the source's
// bytes so far and the buffers its blocked chunks hold.
func TestLive(t *testing.T) {
	gate := make(chan struct{})
	src := &enginetest.MemSource{Data: map[string][]byte{"s": make([]byte, 3*4096)}, Block: gate}
	sink := enginetest.NewMemSink()
	job := &engine.Job{Source: src, ChunkSize: 4096, Parallel: 1, Depth: 1,
		Streams: []engine.Stream{{Name: "s", Size: -1, Objects: []sdk.Object{{Key: "s"}}}},
		Sinks:   []engine.Sink{{Name: "mem", Sink: sink}}}
	r, err := engine.New(job)
	if err != nil {
		t.Fatal(err)
	}
	m := metrics.New(metrics.Options{})
	m.Begin("live", r.Layout().Total)
	m.Start("live", -1, r)
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background())
		done <- err
	}()
	gate <- struct{}{} // one read of 4096 bytes
	gate <- struct{}{} // and another: the first has been counted
	deadline := time.Now().Add(10 * time.Second)
	var ms map[string][]sample
	for {
		ms = gather(t, m.Gatherer())
		if v, _ := lookup(ms, "pipe_stage_bytes_total", "stage", "source", "direction", "out"); v >= 4096 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the source's bytes never showed: %v", ms["pipe_stage_bytes_total"])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, ok := lookup(ms, "pipe_run_success", "pipeline", "live"); ok {
		t.Errorf("an outcome while the run goes on")
	}
	if v := value(t, ms, "pipe_run_duration_seconds", "pipeline", "live"); v <= 0 {
		t.Errorf("duration %v while running", v)
	}
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	m.Finish("live", nil, nil)
	ms = gather(t, m.Gatherer())
	if got := value(t, ms, "pipe_run_success", "pipeline", "live"); got != 1 {
		t.Errorf("success %v", got)
	}
	stored, _ := sink.Get("s")
	if got, want := value(t, ms, "pipe_stage_bytes_total", "stage", "sink mem", "direction", "in"), float64(len(stored)); got != want || want != 3*4096 {
		t.Errorf("sink: %v bytes, it was given %v", got, want)
	}
}

// The textfile parses, is readable by another user, leaves no temporary
// file, and keeps the last success across a failed run.
func TestTextfile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "pipe.prom")
	labels := map[string]string{"database": "shop"}

	ok := metrics.New(metrics.Options{Labels: labels})
	ok.Begin("backup", 1<<20)
	ok.Finish("backup", &runner.Report{Streams: 1}, nil)
	if err := ok.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	ms := read(t, path)
	last := value(t, ms, "pipe_run_last_success_timestamp_seconds", "pipeline", "backup")
	if got := value(t, ms, "pipe_run_success", "pipeline", "backup"); got != 1 || last <= 0 {
		t.Fatalf("success %v, last success %v", got, last)
	}

	// Another database's file in the same place is not taken for ours.
	other := filepath.Join(dir, "other.prom")
	if err := os.WriteFile(other, []byte(`pipe_run_last_success_timestamp_seconds{database="billing",pipeline="backup"} 12345`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	failed := metrics.New(metrics.Options{Labels: labels})
	failed.Begin("backup", 1<<20)
	failed.Finish("backup", &runner.Report{Streams: 1}, fmt.Errorf("it broke"))
	if err := failed.WriteTextfile(path); err != nil {
		t.Fatal(err)
	}
	ms = read(t, path)
	if got := value(t, ms, "pipe_run_success", "pipeline", "backup"); got != 0 {
		t.Errorf("success %v after a failure", got)
	}
	if got := value(t, ms, "pipe_run_last_success_timestamp_seconds", "pipeline", "backup"); got != last {
		t.Errorf("last success %v after a failure, want the earlier %v", got, last)
	}
	if err := failed.WriteTextfile(other); err != nil {
		t.Fatal(err)
	}
	if _, ok := lookup(read(t, other), "pipe_run_last_success_timestamp_seconds"); ok {
		t.Errorf("shop's textfile took billing's last success")
	}

	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644 (node_exporter reads it as another user)", fi.Mode().Perm())
	}
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	if strings.Join(names, " ") != "other.prom pipe.prom" {
		t.Errorf("files left: %v", names)
	}

	if err := ok.WriteTextfile(filepath.Join(dir, "no-such-dir", "x.prom")); err == nil {
		t.Errorf("no error writing into a missing directory")
	}
}

func read(t *testing.T, path string) map[string][]sample {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, string(b))
}

// pushed is what a fake Pushgateway received.
type pushed struct {
	method, path, auth string
	metrics            map[string][]sample
}

// pushgateway implements the Pushgateway's PUT and POST
// /metrics/job/<job>{/<label>/<value>} (decoding the body in the format its
// Content-Type names); status is what it answers.
func pushgateway(t *testing.T, status int) (*httptest.Server, chan pushed) {
	t.Helper()
	got := make(chan pushed, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut && r.Method != http.MethodPost || !strings.HasPrefix(r.URL.Path, "/metrics/job/") {
			http.Error(w, "not the push API", http.StatusNotFound)
			return
		}
		dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
		mfs := map[string]*dto.MetricFamily{}
		for {
			mf := &dto.MetricFamily{}
			if err := dec.Decode(mf); err == io.EOF {
				break
			} else if err != nil {
				t.Errorf("decoding the push: %v", err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			mfs[mf.GetName()] = mf
		}
		got <- pushed{method: r.Method, path: r.URL.EscapedPath(), auth: r.Header.Get("Authorization"), metrics: families(mfs)}
		if status != http.StatusOK {
			http.Error(w, "pushgateway says no", status)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func TestPush(t *testing.T) {
	srv, got := pushgateway(t, http.StatusOK)
	u := strings.Replace(srv.URL, "http://", "http://backup:s3cr%40t@", 1)
	m := metrics.New(metrics.Options{Labels: map[string]string{"database": "shop"}})
	m.Begin("backup", 1<<20)
	m.Finish("backup", &runner.Report{Streams: 2}, nil)
	if err := m.Push(context.Background(), u, map[string]string{"file": "backup.hcl"}); err != nil {
		t.Fatal(err)
	}
	p := <-got
	if p.method != http.MethodPut {
		t.Errorf("a successful run pushes with %s, want PUT (replacing the group)", p.method)
	}
	// The Pushgateway takes the grouping labels in any order.
	parts := strings.Split(strings.TrimPrefix(p.path, "/metrics/"), "/")
	var key []string
	for i := 0; i+1 < len(parts); i += 2 {
		key = append(key, parts[i]+"="+parts[i+1])
	}
	sort.Strings(key)
	if got, want := strings.Join(key, " "), "database=shop file=backup.hcl job=pipe pipeline=backup"; got != want {
		t.Errorf("pushed to %s: grouping key %s, want %s", p.path, got, want)
	}
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("backup:s3cr@t")); p.auth != want {
		t.Errorf("Authorization %q, want %q", p.auth, want)
	}
	if v := value(t, p.metrics, "pipe_run_success"); v != 1 {
		t.Errorf("success %v", v)
	}
	if _, ok := lookup(p.metrics, "pipe_run_last_success_timestamp_seconds"); !ok {
		t.Errorf("no last success in a successful run's push")
	}
	for name, ss := range p.metrics {
		for _, s := range ss {
			if _, ok := s.labels["database"]; ok {
				t.Errorf("%s%v carries a grouping label (the Pushgateway adds it)", name, s.labels)
			}
			if _, ok := s.labels["pipeline"]; ok {
				t.Errorf("%s%v carries a grouping label (the Pushgateway adds it)", name, s.labels)
			}
		}
	}

	// A failed run: POST, without a last success, so the group keeps the
	// last good run's.
	f := metrics.New(metrics.Options{Labels: map[string]string{"database": "shop"}})
	f.Begin("backup", 1<<20)
	f.Finish("backup", nil, fmt.Errorf("broken"))
	if err := f.Push(context.Background(), u, map[string]string{"file": "backup.hcl"}); err != nil {
		t.Fatal(err)
	}
	p = <-got
	if p.method != http.MethodPost {
		t.Errorf("a failed run pushes with %s, want POST", p.method)
	}
	if v := value(t, p.metrics, "pipe_run_success"); v != 0 {
		t.Errorf("success %v", v)
	}
	if _, ok := p.metrics["pipe_run_last_success_timestamp_seconds"]; ok {
		t.Errorf("a failed run pushed a last success")
	}
}

// A Pushgateway that refuses, or is not there, gives an error that names
// the problem and never the password.
func TestPushErrors(t *testing.T) {
	srv, _ := pushgateway(t, http.StatusInternalServerError)
	m := metrics.New(metrics.Options{})
	m.Begin("backup", 1)
	m.Finish("backup", nil, nil)
	const pass = "hunter2-secret"
	err := m.Push(context.Background(), strings.Replace(srv.URL, "http://", "http://u:"+pass+"@", 1), nil)
	if err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("a 500 gave %v", err)
	}
	if err != nil && strings.Contains(err.Error(), pass) {
		t.Errorf("the error shows the password: %v", err)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	err = m.Push(context.Background(), "http://u:"+pass+"@"+addr, nil)
	if err == nil || strings.Contains(err.Error(), pass) {
		t.Errorf("nothing listening gave %v", err)
	}

	for raw, want := range map[string]string{
		"ftp://gw:21":                         "scheme",
		"http://":                             "no host",
		"http://gw:9091/metrics/job/pipe":     "base URL",
		"http://u:" + pass + "@gw:9091/%zz":   "not a URL",
		"http://u:" + pass + "@gw:9091/?a=b":  "query",
		"pushgateway.monitoring:9091/prefix/": "",
	} {
		shown, err := metrics.PushTarget(raw)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", raw, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: error %v, want one about %s", raw, err, want)
		}
		if strings.Contains(shown, pass) || err != nil && strings.Contains(err.Error(), pass) {
			t.Errorf("%s: the password shows: %q, %v", raw, shown, err)
		}
	}
	if shown, _ := metrics.PushTarget("http://u:" + pass + "@gw:9091"); shown != "http://gw:9091" {
		t.Errorf("PushTarget shows %q", shown)
	}
}

func TestListen(t *testing.T) {
	m := metrics.New(metrics.Options{Version: "9.9"})
	m.Begin("backup", 1<<20)
	s, err := m.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if strings.HasSuffix(s.URL(), ":0/metrics") {
		t.Fatalf("URL %s does not tell the port", s.URL())
	}
	resp, err := http.Get(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	ms := parse(t, string(b))
	if v := value(t, ms, "pipe_info", "version", "9.9"); v != 1 {
		t.Errorf("pipe_info %v", v)
	}
	if _, ok := ms["process_resident_memory_bytes"]; !ok {
		t.Errorf("no process metrics beside pipe's")
	}

	// The same address again is in use: an error, at once.
	if _, err := m.Listen(strings.TrimSuffix(strings.TrimPrefix(s.URL(), "http://"), "/metrics")); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("listening twice on one address: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(s.URL()); err == nil {
		resp.Body.Close()
		t.Errorf("still serving after Close")
	}
}

// Each pipeline of a run pushes to its own group: one that succeeded
// replaces its group (PUT, with its last success), one that failed adds to
// its own (POST, without), so neither touches the other's last success.
func TestPushPerPipeline(t *testing.T) {
	srv, got := pushgateway(t, http.StatusOK)
	m := metrics.New(metrics.Options{})
	m.Begin("db1", 1<<20)
	m.Finish("db1", &runner.Report{Streams: 1}, nil)
	m.Begin("db2", 1<<20)
	m.Finish("db2", nil, fmt.Errorf("broken"))
	if err := m.Push(context.Background(), srv.URL, map[string]string{"file": "backup.hcl"}); err != nil {
		t.Fatal(err)
	}
	first, second := <-got, <-got
	if first.method != http.MethodPut || !strings.Contains(first.path+"/", "/pipeline/db1/") {
		t.Errorf("db1 (ok): %s %s, want PUT to its own group", first.method, first.path)
	}
	if _, ok := lookup(first.metrics, "pipe_run_last_success_timestamp_seconds"); !ok {
		t.Errorf("db1's push has no last success")
	}
	if second.method != http.MethodPost || !strings.Contains(second.path+"/", "/pipeline/db2/") {
		t.Errorf("db2 (failed): %s %s, want POST to its own group", second.method, second.path)
	}
	if _, ok := lookup(second.metrics, "pipe_run_last_success_timestamp_seconds"); ok {
		t.Errorf("db2's push has a last success")
	}
	if v := value(t, second.metrics, "pipe_run_success"); v != 0 {
		t.Errorf("db2's push: success %v (another pipeline's series leaked in?)", v)
	}
}

// A partial run (a cluster's database failed) exports each failed
// stream by name; a run without failures exports none.
func TestStreamFailed(t *testing.T) {
	m := metrics.New(metrics.Options{})
	failed := []manifest.Failed{{Stream: "billing.dump", Error: "permission denied"}}
	m.Finish("cluster", &runner.Report{Streams: 3, Failed: failed}, &runner.PartialError{Pipeline: "cluster", Failed: failed, Stored: 2})
	m.Finish("files", &runner.Report{Streams: 1}, nil)
	ms := gather(t, m.Gatherer())
	if got := value(t, ms, "pipe_run_stream_failed", "pipeline", "cluster", "stream", "billing.dump"); got != 1 {
		t.Errorf("billing.dump: %v, want 1", got)
	}
	if n := len(ms["pipe_run_stream_failed"]); n != 1 {
		t.Errorf("%d failed-stream series, want 1: %v", n, ms["pipe_run_stream_failed"])
	}
	if got := value(t, ms, "pipe_run_success", "pipeline", "cluster"); got != 0 {
		t.Errorf("a partial run's success is %v", got)
	}
}

// A run stored although its source found a page damaged exports
// pipe_run_damaged 1 (and fails); a run without damage exports 0.
func TestRunDamaged(t *testing.T) {
	m := metrics.New(metrics.Options{})
	damage := `checksum verification failed in file "./base/5/16397", block 0`
	m.Finish("base", &runner.Report{Streams: 2, Damage: damage}, &runner.DamagedError{Pipeline: "base", RunID: "r", Damage: damage})
	m.Finish("files", &runner.Report{Streams: 1}, nil)
	ms := gather(t, m.Gatherer())
	if got := value(t, ms, "pipe_run_damaged", "pipeline", "base"); got != 1 {
		t.Errorf("the damaged run: pipe_run_damaged %v, want 1", got)
	}
	if got := value(t, ms, "pipe_run_damaged", "pipeline", "files"); got != 0 {
		t.Errorf("a good run: pipe_run_damaged %v, want 0", got)
	}
	if got := value(t, ms, "pipe_run_success", "pipeline", "base"); got != 0 {
		t.Errorf("a damaged run's success is %v", got)
	}
}

// A running binlog archiver's numbers are read at each gather.
func TestBinlogArchiving(t *testing.T) {
	m := metrics.New(metrics.Options{})
	lag, bytes := 1500*time.Millisecond, int64(4096)
	m.BinlogArchiving("binlog", func() metrics.BinlogArchiver {
		return metrics.BinlogArchiver{Lag: lag, Bytes: bytes, Segments: 3, Gaps: 1}
	})
	ms := gather(t, m.Gatherer())
	if got := value(t, ms, "pipe_binlog_lag_seconds", "archive", "binlog"); got != 1.5 {
		t.Errorf("lag %v, want 1.5", got)
	}
	if got := value(t, ms, "pipe_binlog_stored_bytes_total", "archive", "binlog"); got != 4096 {
		t.Errorf("bytes %v, want 4096", got)
	}
	lag, bytes = 0, 8192
	ms = gather(t, m.Gatherer())
	if value(t, ms, "pipe_binlog_lag_seconds", "archive", "binlog") != 0 || value(t, ms, "pipe_binlog_stored_bytes_total", "archive", "binlog") != 8192 || value(t, ms, "pipe_binlog_segments_total", "archive", "binlog") != 3 || value(t, ms, "pipe_binlog_gaps_total", "archive", "binlog") != 1 {
		t.Error("a second gather does not read the archiver's numbers anew")
	}
}
