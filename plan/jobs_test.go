package plan_test

import (
	"testing"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
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
