package plan_test

import (
	"strings"
	"testing"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/profiles"
)

// An endpoint's jobs raise the streams a run moves at once, unless the
// file sets streams itself.
func TestEndpointJobsRaiseStreams(t *testing.T) {
	reg := newRegistry(t)
	streams := func(pipelineLine, jobs string) int {
		t.Helper()
		src := `pipeline "restore" {
  ` + pipelineLine + `
  source "fs" { path = "in/" }
  sink "postgres" {
    host     = "db"
    database = "app"
    ` + jobs + `
  }
}
`
		f, d := pipefile.LoadSource("p.hcl", []byte(src), pipefile.Options{Now: corpusNow, Dir: ".", Schemas: reg})
		if d.HasErrors() {
			t.Fatalf("%s: %v", src, d)
		}
		p, d := plan.New(f, plan.Options{Host: corpusHost})
		if d.HasErrors() {
			t.Fatalf("%s: %v", src, d)
		}
		return p.Pipelines[0].Streams
	}
	profile := streams("", "")
	if profile >= 6 {
		t.Fatalf("the default profile moves %d streams at once; the test needs fewer than 6", profile)
	}
	if got := streams("", "jobs = 6"); got != 6 {
		t.Errorf("jobs = 6: streams = %d, want 6", got)
	}
	if got := streams("streams = 3", "jobs = 6"); got != 3 {
		t.Errorf("streams = 3 and jobs = 6: streams = %d, want the file's 3", got)
	}
	if got := streams("", "jobs = 1"); got != profile {
		t.Errorf("jobs = 1: streams = %d, want the profile's %d", got, profile)
	}
}

// auto adapts to the streams the file says will move at once: all CPUs
// encode one stream; several streams share one encoder per CPU. pipe plan
// says which rule applied.
func TestAutoAdaptsToStreams(t *testing.T) {
	reg := newRegistry(t)
	resolve := func(pipelineLine, jobs string) *plan.Pipeline {
		t.Helper()
		src := `pipeline "backup" {
  profile = "auto"
  ` + pipelineLine + `
  source "postgres" {
    host     = "db"
    database = "app"
    ` + jobs + `
  }
  compress {}
  sink "fs" { path = "out/" }
}
`
		f, d := pipefile.LoadSource("p.hcl", []byte(src), pipefile.Options{Now: corpusNow, Dir: ".", Schemas: reg})
		if d.HasErrors() {
			t.Fatalf("%s: %v", src, d)
		}
		p, d := plan.New(f, plan.Options{Host: corpusHost})
		if d.HasErrors() {
			t.Fatalf("%s: %v", src, d)
		}
		return p.Pipelines[0]
	}
	workers := func(p *plan.Pipeline) int { return p.Stages[0].Workers }
	balanced, _ := profiles.Resolve("balanced", corpusHost)
	one := resolve("streams = 1", "")
	if one.Streams != 1 || workers(one) != corpusHost.CPUs || !strings.Contains(one.Profile.Rule, "one stream") {
		t.Errorf("one stream: %d streams, %d workers, rule %q; want 1 stream and every CPU (%d)", one.Streams, workers(one), one.Profile.Rule, corpusHost.CPUs)
	}
	if workers(one) <= balanced.Workers {
		t.Errorf("auto gives one stream %d workers, no more than balanced's %d", workers(one), balanced.Workers)
	}
	// Not known before the source lists its streams (a pg_dump, a folder):
	// the preset's streams at once, every CPU encoding.
	unknown := resolve("", "")
	if unknown.Streams != balanced.Streams || workers(unknown) != corpusHost.CPUs || !strings.Contains(unknown.Profile.Rule, "not known") {
		t.Errorf("streams not known: %d streams, %d workers, rule %q; want balanced's %d streams and every CPU", unknown.Streams, workers(unknown), unknown.Profile.Rule, balanced.Streams)
	}
	four := resolve("", "jobs = 4")
	if four.Streams != 4 || workers(four) != corpusHost.CPUs || !strings.Contains(four.Profile.Rule, "4 streams") {
		t.Errorf("jobs = 4: %d streams, %d workers, rule %q", four.Streams, workers(four), four.Profile.Rule)
	}
	var out strings.Builder
	pl := &plan.Plan{Host: corpusHost, Pipelines: []*plan.Pipeline{four}}
	pl.Print(&out)
	if !strings.Contains(out.String(), "auto        4 streams at a time") {
		t.Errorf("pipe plan does not show auto's rule:\n%s", out.String())
	}
}
