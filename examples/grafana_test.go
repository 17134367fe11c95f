package examples_test

// The Grafana dashboard (grafana/pipe-dashboard.json) and the fleets'
// metrics: every PromQL expression of the dashboard names only metrics
// that pipe exposes, as gathered from a real run, and filters by the
// dashboard's pipeline variable; every fleet job pushes its metrics under
// a grouping key of its own.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/metrics"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
)

const dashboardFile = "grafana/pipe-dashboard.json"

// exposedMetrics runs a small backup with metrics on, as pipe run does,
// adds a retry, and returns the names of the metrics gathered.
func exposedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "in"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "in", "data.txt"), []byte(strings.Repeat("pipe metrics\n", 20000)), 0o644); err != nil {
		t.Fatal(err)
	}
	reg, err := host.NewRegistry(all.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	src := fmt.Sprintf(`
pipeline "backup" {
  source "fs" { path = %q }
  compress {}
  checksum {}
  sink "fs" { path = %q }
}`, filepath.Join(dir, "in")+"/", filepath.Join(dir, "out")+"/")
	f, diags := pipefile.LoadSource("metrics.hcl", []byte(src), pipefile.Options{RunID: "run-1", Schemas: reg})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	pl, diags := plan.New(f, plan.Options{Host: profiles.Host{CPUs: 2, Memory: 8 << 30}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	m := metrics.New(metrics.Options{Version: "test"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, p := range pl.Pipelines {
		m.Begin(p.Name, p.Budget())
		rep, err := runner.Run(ctx, p, runner.Options{RunID: "run-1", Registry: reg, Progress: m})
		m.Finish(p.Name, rep, err)
		if err != nil {
			t.Fatal(err)
		}
	}
	m.Retried("backup", "sink fs")
	mfs, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	if !names["pipe_stage_bytes_total"] || !names["pipe_retries_total"] {
		t.Fatalf("the run exposed only %v", slices.Sorted(maps.Keys(names)))
	}
	return names
}

var (
	promString    = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	promMatchers  = regexp.MustCompile(`\{[^}]*\}`)
	promRange     = regexp.MustCompile(`\[[^\]]*\]`)
	promLabelList = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent     = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords  = []string{"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right", "inf", "nan"}
)

// metricNames returns the metric names a PromQL expression selects: its
// identifiers outside label matchers, ranges and label lists that are
// neither functions nor keywords.
func metricNames(expr string) []string {
	s := promString.ReplaceAllString(expr, `""`)
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	s = promLabelList.ReplaceAllString(s, " ")
	var out []string
	for _, at := range promIdent.FindAllStringIndex(s, -1) {
		if at[0] > 0 && strings.ContainsRune("0123456789.$", rune(s[at[0]-1])) {
			continue // part of a number (1e3) or a variable
		}
		name := s[at[0]:at[1]]
		if strings.HasPrefix(strings.TrimSpace(s[at[1]:]), "(") || slices.Contains(promKeywords, strings.ToLower(name)) {
			continue // a function call or a keyword
		}
		out = append(out, name)
	}
	return out
}

func TestMetricNamesOfPromQL(t *testing.T) {
	for expr, want := range map[string]string{
		`rate(foo_total{a="b}",c=~"$x"}[$__rate_interval]) / ignoring(stage, direction) group_left bar{x="y"}`: "foo_total bar",
		`time() - last_ts{p=~"$pipeline"}`:                       "last_ts",
		`sum by (pipeline) (x:rate5m) > 1e3 and on(instance) up`: "x:rate5m up",
		`pipe_x / $threshold`:                                    "pipe_x",
	} {
		if got := strings.Join(metricNames(expr), " "); got != want {
			t.Errorf("metricNames(%s) = %q, want %q", expr, got, want)
		}
	}
}

// dashboard is the part of Grafana's dashboard model the test reads.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
			Datasource *datasource     `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []struct {
		RefID      string      `json:"refId"`
		Expr       string      `json:"expr"`
		Datasource *datasource `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

const promDS = "${DS_PROMETHEUS}"

func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" {
		t.Errorf("the dashboard has no title or uid")
	}
	exposed := exposedMetrics(t)
	used := map[string]bool{}
	check := func(where, expr string) {
		names := metricNames(expr)
		if len(names) == 0 {
			t.Errorf("%s: %q selects no metric", where, expr)
		}
		for _, n := range names {
			used[n] = true
			if !exposed[n] {
				t.Errorf("%s: %s is not a metric pipe exposes (%q)", where, n, expr)
			}
		}
	}

	// The data source is a variable, so the dashboard imports and
	// provisions on any Grafana; pipeline picks the pipelines.
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Type == "query" {
			if v.Datasource == nil || v.Datasource.UID != promDS {
				t.Errorf("variable %s does not query ${DS_PROMETHEUS}", v.Name)
			}
			var q struct {
				Query string `json:"query"`
			}
			if json.Unmarshal(v.Query, &q) != nil {
				q.Query = strings.Trim(string(v.Query), `"`)
			}
			m := regexp.MustCompile(`^label_values\((\w+),\s*(\w+)\)$`).FindStringSubmatch(q.Query)
			if m == nil {
				t.Errorf("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
				continue
			}
			check("variable "+v.Name, m[1])
		}
	}
	if vars["DS_PROMETHEUS"] != "datasource" || vars["pipeline"] != "query" {
		t.Errorf("want a datasource variable DS_PROMETHEUS and a query variable pipeline, have %v", vars)
	}

	panels := flatten(d.Panels)
	if len(panels) < 8 {
		t.Errorf("%d panels", len(panels))
	}
	ids := map[int]bool{}
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" {
			continue
		}
		where := fmt.Sprintf("panel %q", p.Title)
		if p.Datasource == nil || p.Datasource.UID != promDS || p.Datasource.Type != "prometheus" {
			t.Errorf("%s: data source %v, want prometheus %s", where, p.Datasource, promDS)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s has no query", where)
		}
		for _, tg := range p.Targets {
			w := where + " query " + tg.RefID
			if tg.Datasource != nil && tg.Datasource.UID != promDS {
				t.Errorf("%s: data source %s", w, tg.Datasource.UID)
			}
			check(w, tg.Expr)
			for _, sel := range promMatchers.FindAllString(tg.Expr, -1) {
				if !strings.Contains(sel, `pipeline=~"$pipeline"`) {
					t.Errorf("%s: selector %s does not filter by $pipeline", w, sel)
				}
			}
		}
	}
	var unused []string
	for n := range exposed {
		if !used[n] {
			unused = append(unused, n)
		}
	}
	slices.Sort(unused)
	t.Logf("metrics the dashboard does not show: %v", unused)
}

// Every fleet job pushes its metrics to a Pushgateway, under a grouping
// key of its own (a second database's push must not replace the first's).
func TestFleetPushesMetrics(t *testing.T) {
	jobs := append(k8sJobs(t), nomadJobs(t)...)
	groups := map[string]string{}
	for _, j := range jobs {
		var gateway string
		var labels []string
		for i := 3; i+1 < len(j.argv); i++ {
			switch j.argv[i] {
			case "--pushgateway":
				gateway = j.argv[i+1]
			case "--metrics-label":
				labels = append(labels, j.argv[i+1])
			}
		}
		// Kubernetes puts a variable of the container in $(NAME).
		if m := regexp.MustCompile(`^\$\((\w+)\)$`).FindStringSubmatch(gateway); m != nil {
			i := slices.IndexFunc(j.env, func(e jobEnv) bool { return e.name == m[1] })
			if i < 0 {
				t.Errorf("%s: --pushgateway %s, and the container has no variable %s (Kubernetes would pass it literally)", j.name, gateway, m[1])
				continue
			}
			gateway = j.env[i].value
		}
		if gateway == "" {
			t.Errorf("%s does not push its metrics: no --pushgateway", j.name)
			continue
		}
		if _, err := metrics.PushTarget(gateway); err != nil {
			t.Errorf("%s: --pushgateway %s: %v", j.name, gateway, err)
		}
		slices.Sort(labels)
		key := strings.Join(append(labels, "gateway="+gateway), ",")
		if other, dup := groups[key]; dup {
			t.Errorf("%s and %s push under the same grouping key (%s): the second replaces the first", other, j.name, key)
		}
		groups[key] = j.name
	}
	if len(groups) < 4 {
		t.Errorf("%d jobs push metrics, want every job of both fleets", len(groups))
	}
}
