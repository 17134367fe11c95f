package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/pipebackup/pipe/internal/promtest"
	"github.com/pipebackup/pipe/internal/syncbuf"
)

// series is one metric's value by its labels.
type series = promtest.Series

func parseProm(t *testing.T, text []byte) map[string]series {
	t.Helper()
	ms, err := promtest.Parse(bytes.NewReader(text))
	if err != nil {
		t.Fatalf("the metrics do not parse: %v\n%s", err, text)
	}
	return ms
}

// one returns the value of the one series of name whose labels hold every
// one of want (name="value" each).
func one(t *testing.T, ms map[string]series, name string, want ...string) float64 {
	t.Helper()
	v, n := promtest.Find(ms, name, want...)
	if n != 1 {
		t.Fatalf("%d series %s{%s} among %v", n, name, strings.Join(want, ","), ms[name])
	}
	return v
}

// runPipe runs the CLI in-process and returns its exit code and output.
func runPipe(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := execute(&out, &errb, args)
	return code, out.String(), errb.String()
}

const metricsPipeline = `
pipeline "backup" {
  chunk_size = "64KiB"
  source "fs" { path = "in/" }
  compress {}
  checksum {}
  sink "fs" { path = "out/" }
}
`

const failingPipeline = `
pipeline "backup" {
  chunk_size = "64KiB"
  source "exec" {
    command = ["sh", "-c", "head -c 100000 /dev/zero; echo 'pg_dump: connection refused' >&2; exit 3"]
    name    = "dump"
  }
  compress {}
  sink "fs" { path = "out/" }
}
`

// metricsDir makes a working directory with in/data.bin and the two
// pipeline files, and enters it.
func metricsDir(t *testing.T) (dataSize int) {
	t.Helper()
	t.Chdir(t.TempDir())
	data := mixedData(3, 300_000)
	os.MkdirAll("in", 0o755)
	os.MkdirAll("prom", 0o755)
	for name, content := range map[string][]byte{"in/data.bin": data, "p.hcl": []byte(metricsPipeline), "fail.hcl": []byte(failingPipeline)} {
		if err := os.WriteFile(name, content, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return len(data)
}

// storedSize is the size of the one object the sink wrote.
func storedSize(t *testing.T) int64 {
	t.Helper()
	m, _ := filepath.Glob("out/data.bin*")
	if len(m) != 1 {
		t.Fatalf("objects in out/: %v", m)
	}
	fi, err := os.Stat(m[0])
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// --metrics-textfile holds what the run did; a failed run's file says so
// and keeps the last success.
func TestMetricsTextfile(t *testing.T) {
	size := metricsDir(t)
	code, _, stderr := runPipe("run", "p.hcl", "--progress", "never", "--metrics-textfile", "prom/pipe.prom", "--metrics-label", "database=shop")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	b, err := os.ReadFile("prom/pipe.prom")
	if err != nil {
		t.Fatal(err)
	}
	ms := parseProm(t, b)
	if got := one(t, ms, "pipe_stage_bytes_total", `stage="source"`, `direction="out"`, `database="shop"`); got != float64(size) {
		t.Errorf("source: %v bytes, the file has %d", got, size)
	}
	if got, want := one(t, ms, "pipe_stage_bytes_total", `stage="sink fs"`, `direction="in"`), storedSize(t); got != float64(want) {
		t.Errorf("sink: %v bytes, it stored %d", got, want)
	}
	if got := one(t, ms, "pipe_stage_chunks_total", `stage="source"`); got != 5 { // 300,000 bytes in 64 KiB chunks
		t.Errorf("source: %v chunks, want 5", got)
	}
	if got := one(t, ms, "pipe_run_success", `pipeline="backup"`); got != 1 {
		t.Errorf("success %v", got)
	}
	last := one(t, ms, "pipe_run_last_success_timestamp_seconds", `pipeline="backup"`)

	code, _, stderr = runPipe("run", "fail.hcl", "--progress", "never", "--metrics-textfile", "prom/pipe.prom", "--metrics-label", "database=shop")
	if code != exitFailed {
		t.Fatalf("the failing run: exit %d\n%s", code, stderr)
	}
	b, _ = os.ReadFile("prom/pipe.prom")
	ms = parseProm(t, b)
	if got := one(t, ms, "pipe_run_success", `pipeline="backup"`); got != 0 {
		t.Errorf("success %v after a failed run", got)
	}
	if got := one(t, ms, "pipe_stage_errors_total", `stage="source"`); got != 1 {
		t.Errorf("source errors %v, want 1", got)
	}
	if got := one(t, ms, "pipe_run_last_success_timestamp_seconds", `pipeline="backup"`); got != last {
		t.Errorf("last success %v after a failed run, want the earlier %v", got, last)
	}
	if left, _ := filepath.Glob("prom/.*"); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// fakePushgateway answers PUT and POST /metrics/job/… as a Pushgateway,
// decoding each push; status is its answer.
type fakePushgateway struct {
	mu     sync.Mutex
	pushes []push
	status int
}

type push struct {
	method, path, auth string
	metrics            map[string]series
}

func (g *fakePushgateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if (r.Method != http.MethodPut && r.Method != http.MethodPost) || !strings.HasPrefix(r.URL.Path, "/metrics/job/") {
		http.NotFound(w, r)
		return
	}
	dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
	mfs := map[string]*dto.MetricFamily{}
	for {
		mf := &dto.MetricFamily{}
		if err := dec.Decode(mf); err == io.EOF {
			break
		} else if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mfs[mf.GetName()] = mf
	}
	g.mu.Lock()
	g.pushes = append(g.pushes, push{r.Method, r.URL.EscapedPath(), r.Header.Get("Authorization"), promtest.Families(mfs)})
	g.mu.Unlock()
	if g.status != 0 {
		http.Error(w, "no", g.status)
	}
}

func TestMetricsPushgateway(t *testing.T) {
	size := metricsDir(t)
	gw := &fakePushgateway{}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	const pass = "pushg4teSecret"
	url := strings.Replace(srv.URL, "http://", "http://ops:"+pass+"@", 1)

	code, stdout, stderr := runPipe("run", "p.hcl", "--progress", "never", "--json", "--log-level", "info", "--pushgateway", url, "--metrics-label", "database=shop")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if strings.Contains(stdout+stderr, pass) {
		t.Errorf("the password shows:\n%s%s", stdout, stderr)
	}
	if !strings.Contains(stderr, "metrics pushed pushgateway="+srv.URL+" job=pipe file=p.hcl") {
		t.Errorf("stderr does not say where the metrics went:\n%s", stderr)
	}
	if len(gw.pushes) != 1 {
		t.Fatalf("%d pushes, want 1", len(gw.pushes))
	}
	p := gw.pushes[0]
	if got := groupingKey(p.path); p.method != http.MethodPut || got != `database="shop",file="p.hcl",job="pipe",pipeline="backup"` {
		t.Errorf("%s %s (grouping key %s), want PUT to job pipe, database shop, file p.hcl, pipeline backup", p.method, p.path, got)
	}
	if want := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:"+pass)); p.auth != want {
		t.Errorf("Authorization %q, want %q", p.auth, want)
	}
	if got := one(t, p.metrics, "pipe_stage_bytes_total", `stage="source"`, `direction="out"`); got != float64(size) {
		t.Errorf("pushed: source %v bytes, the file has %d", got, size)
	}
	if got, want := one(t, p.metrics, "pipe_stage_bytes_total", `stage="sink fs"`, `direction="in"`), storedSize(t); got != float64(want) {
		t.Errorf("pushed: sink %v bytes, it stored %d", got, want)
	}
	if got := one(t, p.metrics, "pipe_run_success"); got != 1 {
		t.Errorf("pushed: success %v", got)
	}

	// A failed run pushes with POST, without a last success.
	code, _, stderr = runPipe("run", "fail.hcl", "--progress", "never", "--pushgateway", url, "--metrics-label", "database=shop")
	if code != exitFailed || len(gw.pushes) != 2 {
		t.Fatalf("the failing run: exit %d, %d pushes\n%s", code, len(gw.pushes), stderr)
	}
	p = gw.pushes[1]
	if got := one(t, p.metrics, "pipe_run_success"); p.method != http.MethodPost || got != 0 {
		t.Errorf("the failed run: %s with success %v, want POST with 0", p.method, got)
	}
	if _, n := promtest.Find(p.metrics, "pipe_run_last_success_timestamp_seconds"); n != 0 {
		t.Errorf("the failed run pushed a last success")
	}

	// A Pushgateway that refuses: a warning, and the backup still counts.
	gw.status = http.StatusServiceUnavailable
	os.RemoveAll("out")
	code, _, stderr = runPipe("run", "p.hcl", "--progress", "never", "--pushgateway", url)
	if code != 0 {
		t.Errorf("a failed push failed the backup: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "Warning: --pushgateway: the metrics were not pushed to "+srv.URL) || !strings.Contains(stderr, "503") {
		t.Errorf("no warning about the refused push:\n%s", stderr)
	}
	if strings.Contains(stderr, pass) {
		t.Errorf("the warning shows the password:\n%s", stderr)
	}
}

// groupingKey reads the labels of a Pushgateway path,
// /metrics/job/<job>{/<label>/<value>}, in any order, sorted.
func groupingKey(path string) string {
	parts := strings.Split(strings.TrimPrefix(path, "/metrics/"), "/")
	var ls []string
	for i := 0; i+1 < len(parts); i += 2 {
		ls = append(ls, fmt.Sprintf("%s=%q", parts[i], parts[i+1]))
	}
	sort.Strings(ls)
	return strings.Join(ls, ",")
}

// --metrics-addr serves the metrics while the run goes on: scraped in the
// middle of a run whose source waits for the test to let it end.
func TestMetricsAddr(t *testing.T) {
	metricsDir(t)
	os.WriteFile("slow.hcl", []byte(`
pipeline "slow" {
  chunk_size = "64KiB"
  source "exec" {
    command = ["sh", "-c", "head -c 200000 /dev/zero; while [ ! -e release ]; do sleep 0.05; done"]
    name    = "dump"
  }
  compress {}
  sink "fs" { path = "out/" }
}
`), 0o644)
	var stdout, stderr syncbuf.Buffer
	done := make(chan int, 1)
	go func() {
		done <- execute(&stdout, &stderr, []string{"run", "slow.hcl", "--progress", "never", "--metrics-addr", "127.0.0.1:0"})
	}()
	defer os.WriteFile("release", nil, 0o644) // whatever happens, let the run end

	var url string
	var ms map[string]series
	deadline := time.Now().Add(time.Minute)
	for {
		if v, n := promtest.Find(ms, "pipe_stage_bytes_total", `stage="source"`); n == 1 && v >= 3*65536 {
			break // three chunks of 64 KiB read, the fourth waits for release
		}
		if time.Now().After(deadline) {
			t.Fatalf("no scrape saw the source's first chunks in a minute; stderr:\n%s\nlast scrape: %v", stderr.String(), ms)
		}
		select {
		case code := <-done:
			t.Fatalf("the run ended (exit %d) before it was scraped:\n%s", code, stderr.String())
		case <-time.After(20 * time.Millisecond):
		}
		if url == "" {
			if u, port, ok := promtest.ServedAt(stderr.String()); ok {
				if port == "0" {
					t.Fatalf("the port is not told: %s", u)
				}
				url = u
			}
			continue
		}
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ms = parseProm(t, b)
	}
	if _, n := promtest.Find(ms, "pipe_run_success"); n != 0 {
		t.Errorf("an outcome while the run goes on: %v", ms["pipe_run_success"])
	}
	if got := one(t, ms, "pipe_run_duration_seconds", `pipeline="slow"`); got <= 0 {
		t.Errorf("duration %v while running", got)
	}
	if _, ok := ms["go_goroutines"]; !ok {
		t.Errorf("no Go runtime metrics beside pipe's")
	}

	os.WriteFile("release", nil, 0o644)
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("exit %d\n%s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the run did not end a minute after its source was released")
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Errorf("still serving after the command ended")
	}
}

// Bad metrics flags and a busy address fail before the run: exit code 2,
// nothing written.
func TestMetricsFlagErrors(t *testing.T) {
	metricsDir(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-addr", ln.Addr().String()}, "--metrics-addr " + ln.Addr().String() + ": listen tcp " + ln.Addr().String() + ": bind: address already in use"},
		{[]string{"--metrics-textfile", "nowhere/pipe.prom"}, "--metrics-textfile nowhere/pipe.prom: the directory nowhere is not there"},
		{[]string{"--pushgateway", "ftp://u:hunter2@gw"}, `--pushgateway: scheme "ftp"`},
		{[]string{"--metrics-textfile", "prom/p.prom", "--metrics-label", "stage=x"}, "--metrics-label stage: pipe sets stage itself"},
		{[]string{"--metrics-textfile", "prom/p.prom", "--metrics-label", "2x=y"}, `--metrics-label "2x=y": write --metrics-label name=value`},
	} {
		code, _, stderr := runPipe(append([]string{"run", "p.hcl", "--progress", "never"}, tc.args...)...)
		if code != exitInvalid || !strings.Contains(stderr, "Error: "+tc.want) {
			t.Errorf("%v: exit %d, want %d and %q:\n%s", tc.args, code, exitInvalid, tc.want, stderr)
		}
		if strings.Contains(stderr, "hunter2") {
			t.Errorf("%v: the password shows:\n%s", tc.args, stderr)
		}
		if _, err := os.Stat("out"); err == nil {
			t.Fatalf("%v: the run started", tc.args)
		}
	}
}

// With --log-format json, where the metrics are served is a record.
func TestMetricsAddrJSONLog(t *testing.T) {
	metricsDir(t)
	code, _, stderr := runPipe("run", "p.hcl", "--progress", "never", "--log-format", "json", "--metrics-addr", "127.0.0.1:0")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	for _, line := range strings.Split(strings.TrimSpace(stderr), "\n") {
		var rec struct {
			Msg string `json:"msg"`
			URL string `json:"url"`
		}
		if json.Unmarshal([]byte(line), &rec) != nil {
			t.Errorf("stderr has a line that is not JSON: %q", line)
			continue
		}
		if rec.Msg == "serving metrics while the run goes on" {
			if !regexp.MustCompile(`^http://127\.0\.0\.1:[1-9]\d*/metrics$`).MatchString(rec.URL) {
				t.Errorf("url %q", rec.URL)
			}
			return
		}
	}
	t.Errorf("no record says where the metrics are served:\n%s", stderr)
}
