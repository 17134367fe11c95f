package metrics

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Job is the Pushgateway job pipe pushes under.
const Job = "pipe"

// Server serves /metrics while a run goes on.
type Server struct {
	ln  net.Listener
	srv *http.Server
}

// Listen starts serving the metrics at http://addr/metrics, with the Go
// runtime's and the process's (go_*, process_*) beside the pipe_* ones. An
// address in use fails here, before any run. Port 0 picks a free port:
// Server.URL tells which.
func (m *Metrics) Listen(addr string) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	runtime := prometheus.NewRegistry()
	runtime.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{m.reg, runtime}, promhttp.HandlerOpts{}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprintln(w, "pipe: the metrics of this run are at /metrics")
	})
	s := &Server{ln: ln, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(ln) }() // ErrServerClosed once Close shuts it down
	return s, nil
}

// URL is where the metrics are served: the address listened on.
func (s *Server) URL() string { return "http://" + s.ln.Addr().String() + "/metrics" }

// Close stops serving, letting a scrape in progress finish for a second.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		return s.srv.Close()
	}
	return nil
}

// WriteTextfile writes the metrics to path in the text exposition format,
// for node_exporter's textfile collector (which reads only files named
// *.prom): into a temporary file in the same directory, then renamed over
// path, so the collector never reads half a file. A pipeline that did not
// succeed this time keeps the pipe_run_last_success_timestamp_seconds that
// path held, so that "time since the last good backup" survives a failure.
func (m *Metrics) WriteTextfile(path string) error {
	m.carry(path)
	mfs, err := m.reg.Gather()
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, there is nothing to remove
	enc := expfmt.NewEncoder(f, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if err = enc.Encode(mf); err != nil {
			break
		}
	}
	if err == nil {
		// node_exporter often runs as another user.
		err = f.Chmod(0o644)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// carry reads the last-success timestamps of an earlier textfile at path,
// those with exactly this Metrics' labels. A missing or unreadable file
// carries nothing: it is about to be replaced.
func (m *Metrics) carry(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(f)
	if err != nil {
		return
	}
	read := func(name string, key ...string) map[string]float64 {
		by := "pipeline"
		if len(key) > 0 {
			by = key[0]
		}
		carried := map[string]float64{}
		for _, mt := range mfs[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range mt.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			pipeline, ok := labels[by]
			delete(labels, by)
			if ok && maps.Equal(labels, m.labels) && mt.GetGauge() != nil {
				carried[pipeline] = mt.GetGauge().GetValue()
			}
		}
		return carried
	}
	runs, verifies := read("pipe_run_last_success_timestamp_seconds"), read("pipe_verify_last_success_timestamp_seconds")
	pushes := read("pipe_wal_last_push_timestamp_seconds", "archive")
	drills := read("pipe_drill_last_success_timestamp_seconds")
	m.mu.Lock()
	m.carried, m.carriedVerify, m.carriedPush, m.carriedDrill = runs, verifies, pushes, drills
	m.mu.Unlock()
}

// PushTarget checks a Pushgateway URL (http://host:9091, or host:9091)
// and returns it fit to print: without the password it may hold.
func PushTarget(raw string) (string, error) {
	u, _, _, err := pushURL(raw)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// pushURL splits raw into the URL without credentials and the credentials
// of its user:password@ part.
func pushURL(raw string) (u *url.URL, user, pass string, err error) {
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err = url.Parse(raw)
	if err != nil {
		// url.Error quotes the URL: say what is wrong without it.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, "", "", fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, "", "", fmt.Errorf("scheme %q: want http:// or https://", u.Scheme)
	}
	if u.Host == "" {
		return nil, "", "", errors.New("no host: want http://host:9091")
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, "", "", errors.New("a Pushgateway URL has no query or fragment")
	}
	if strings.Contains(u.Path, "/metrics/job/") {
		return nil, "", "", fmt.Errorf("give the Pushgateway's base URL, without /metrics/job/…: pipe adds job %q and the grouping key", Job)
	}
	if u.User != nil {
		user = u.User.Username()
		pass, _ = u.User.Password()
		u.User = nil
	}
	return u, user, pass, nil
}

// Push sends the metrics to the Pushgateway at rawURL under job "pipe", a
// group per pipeline that ran, keyed by grouping, this Metrics' labels
// (which are then left off the metrics themselves, as the Pushgateway
// requires) and the pipeline. A pipeline that succeeded replaces its
// group's metrics (PUT); one that failed replaces only the metrics it has
// (POST) and leaves out its pipe_run_last_success_timestamp_seconds, so
// the group keeps the last successful run's. Credentials in the URL (user:password@) go in an
// Authorization header and never appear in an error.
func (m *Metrics) Push(ctx context.Context, rawURL string, grouping map[string]string) error {
	u, user, pass, err := pushURL(rawURL)
	if err != nil {
		return err
	}
	type outcome struct {
		name  string
		ok    bool
		extra map[string]string // more of the grouping key
		wal   bool              // name is a WAL archive's
	}
	m.mu.Lock()
	var runs []outcome
	for _, p := range m.pipelines {
		runs = append(runs, outcome{p.name, p.finished && p.ok, nil, false})
	}
	for _, v := range m.verifies {
		// Its own group: a check's push must not replace the metrics of
		// the pipeline's runs.
		runs = append(runs, outcome{v.pipeline, v.ok, map[string]string{"operation": "verify"}, false})
	}
	for _, r := range m.drills {
		runs = append(runs, outcome{r.pipeline, r.ok, map[string]string{"operation": "drill"}, false})
	}
	for _, name := range slices.Sorted(maps.Keys(m.wals)) {
		// A group per archive, added to (POST): pushes, fetches and
		// checks each leave their own metrics in it.
		runs = append(runs, outcome{name, false, map[string]string{"operation": "wal"}, true})
	}
	m.mu.Unlock()
	var errs []error
	for _, r := range runs {
		// A group per pipeline: its last success survives another
		// pipeline's failure, and jobs running different pipelines of one
		// file do not replace each other's metrics.
		g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
			mfs, err := m.bare.Gather()
			if r.wal {
				return only(mfs, "archive", r.name, false), err
			}
			return only(mfs, "pipeline", r.name, !r.ok), err
		})
		p := push.New(u.String(), Job).Gatherer(g).Client(&http.Client{Timeout: 30 * time.Second})
		keys := map[string]string{"pipeline": r.name}
		if r.wal {
			keys = map[string]string{"archive": r.name}
		}
		maps.Copy(keys, r.extra)
		maps.Copy(keys, grouping)
		maps.Copy(keys, m.labels)
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			p.Grouping(k, keys[k])
		}
		if user != "" || pass != "" {
			p.BasicAuth(user, pass)
		}
		var err error
		if r.ok {
			err = p.PushContext(ctx)
		} else {
			err = p.AddContext(ctx)
		}
		if err != nil {
			if pass != "" {
				err = errors.New(sdk.Scrub(err.Error(), pass))
			}
			what := "pipeline"
			if r.wal {
				what = "archive"
			}
			errs = append(errs, fmt.Errorf("%s %s: %w", what, r.name, err))
		}
	}
	return errors.Join(errs...)
}

// only keeps the metrics whose label key is name (and those without
// the label, pipe_info), without that label; without the last success when
// it failed, so the group keeps the last good run's.
func only(mfs []*dto.MetricFamily, key, name string, failed bool) []*dto.MetricFamily {
	out := mfs[:0]
	for _, mf := range mfs {
		if failed && (mf.GetName() == "pipe_run_last_success_timestamp_seconds" || mf.GetName() == "pipe_verify_last_success_timestamp_seconds" ||
			mf.GetName() == "pipe_drill_last_success_timestamp_seconds") {
			continue
		}
		ms := mf.Metric[:0]
		for _, m := range mf.Metric {
			keep := true
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case key:
					keep = keep && l.GetValue() == name
				case "pipeline", "archive":
					keep = false // another group's
				}
			}
			if keep {
				// The grouping key carries the pipeline; the Pushgateway
				// puts it back on every metric.
				m.Label = slices.DeleteFunc(m.Label, func(l *dto.LabelPair) bool { return l.GetName() == key })
				ms = append(ms, m)
			}
		}
		if len(ms) > 0 {
			mf.Metric = ms
			out = append(out, mf)
		}
	}
	return out
}
