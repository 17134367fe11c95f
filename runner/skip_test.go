package runner

import (
	"context"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// chooser declines the objects whose stream is in no.
type chooser struct{ no map[string]bool }

func (chooser) Create(context.Context, sdk.Object) (sdk.ObjectWriter, error) { return nil, nil }
func (c chooser) Declines(objs []sdk.Object) []bool {
	out := make([]bool, len(objs))
	for i, o := range objs {
		out[i] = c.no[o.Stream]
	}
	return out
}

type plainSink struct{}

func (plainSink) Create(context.Context, sdk.Object) (sdk.ObjectWriter, error) { return nil, nil }

func TestSkipDeclined(t *testing.T) {
	setup := func(sinks ...sdk.Sink) ([]*endpoint, *engine.Job, *streamsPlan) {
		var eps []*endpoint
		for _, s := range sinks {
			eps = append(eps, &endpoint{sink: s})
		}
		sp := &streamsPlan{total: 60}
		job := &engine.Job{}
		for _, n := range []string{"a.dump", "b.dump", "c.dump"} {
			sp.streams = append(sp.streams, stream{name: n, source: n, size: 20})
			st := engine.Stream{Name: n}
			for range sinks {
				st.Objects = append(st.Objects, sdk.Object{Key: n, Stream: n})
			}
			job.Streams = append(job.Streams, st)
		}
		return eps, job, sp
	}
	// Declined by every sink: skipped; wanted by one: read.
	eps, job, sp := setup(chooser{map[string]bool{"a.dump": true, "c.dump": true}}, chooser{map[string]bool{"a.dump": true}})
	if got := skipDeclined(eps, job, sp); strings.Join(got, " ") != "a.dump" {
		t.Errorf("skipped %v, want a.dump", got)
	}
	if len(job.Streams) != 2 || job.Streams[0].Name != "b.dump" || sp.streams[1].name != "c.dump" || sp.total != 40 {
		t.Errorf("left %d streams (%+v), total %d", len(job.Streams), sp.streams, sp.total)
	}
	// A sink that does not choose wants everything.
	eps, job, _ = setup(chooser{map[string]bool{"a.dump": true}}, plainSink{})
	if got := skipDeclined(eps, job, sp); len(got) != 0 || len(job.Streams) != 3 {
		t.Errorf("skipped %v with a sink that wants all", got)
	}
}

// A restore leaves out a group of which a stream failed in the backup
// (a database read table by table that lacks a table), and only it.
func TestSkipIncomplete(t *testing.T) {
	names := []string{"globals.sql", "shop/pre-data.dump", "shop/data/public/a.copy", "shop/post-data.dump", "crm/pre-data.dump", "crm/post-data.dump", "hr.dump"}
	sp := &streamsPlan{total: int64(10 * len(names))}
	job := &engine.Job{}
	for _, n := range names {
		sp.streams = append(sp.streams, stream{name: n, source: n, size: 10})
		job.Streams = append(job.Streams, engine.Stream{Name: n})
	}
	failed := []manifest.Failed{{Stream: "crm/data/public/a.copy", Error: "gone"}, {Stream: "secret.dump", Error: "permission denied"}}
	got := skipIncomplete(job, sp, failed)
	if strings.Join(got, " ") != "crm/pre-data.dump crm/post-data.dump" {
		t.Errorf("left out %v, want crm's streams", got)
	}
	var left []string
	for _, st := range job.Streams {
		left = append(left, st.Name)
	}
	if strings.Join(left, " ") != "globals.sql shop/pre-data.dump shop/data/public/a.copy shop/post-data.dump hr.dump" || len(sp.streams) != 5 || sp.total != 50 {
		t.Errorf("left %v (%d planned, total %d)", left, len(sp.streams), sp.total)
	}
	if got := skipIncomplete(job, sp, []manifest.Failed{{Stream: "secret.dump"}}); len(got) != 0 {
		t.Errorf("a failed stream of no group left out %v", got)
	}
}
