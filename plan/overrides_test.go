package plan_test

import (
	"testing"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
)

// Overrides beat both the file and the profile, and the budget follows
// them (the sink's multipart buffers grow with part_size × concurrency).
func TestOverrides(t *testing.T) {
	reg := newRegistry(t)
	const src = `pipeline "p" {
  chunk_size = "1MiB"
  source "fs" { path = "in/" }
  compress {
    workers = 3
    level   = 5
  }
  sink "s3" {
    bucket      = "b"
    key         = "x/"
    part_size   = "8MiB"
  }
}
`
	load := func(ov map[string]int64) *plan.Pipeline {
		t.Helper()
		f, d := pipefile.LoadSource("p.hcl", []byte(src), pipefile.Options{Now: corpusNow, Dir: ".", Schemas: reg})
		if d.HasErrors() {
			t.Fatal(d)
		}
		p, d := plan.New(f, plan.Options{Host: corpusHost, Memory: reg.Memory, Overrides: ov})
		if d.HasErrors() {
			t.Fatal(d)
		}
		return p.Pipelines[0]
	}
	base := load(nil)
	c := base.Stage("compress")
	if base.ChunkSize != 1<<20 || c.Workers != 3 || c.Level != 5 || base.Sinks[0].Values["part_size"] != int64(8<<20) {
		t.Fatalf("without overrides: chunk %d, workers %d, level %d, part_size %v", base.ChunkSize, c.Workers, c.Level, base.Sinks[0].Values["part_size"])
	}
	p := load(map[string]int64{"chunk_size": 2 << 20, "workers": 1, "level": 1, "streams": 3, "part_size": 16 << 20, "concurrency": 2})
	c = p.Stage("compress")
	if p.ChunkSize != 2<<20 || c.ChunkSize != 2<<20 || c.Workers != 1 || c.Level != 1 || p.Streams != 3 {
		t.Errorf("overridden: chunk %d, frame %d, workers %d, level %d, streams %d", p.ChunkSize, c.ChunkSize, c.Workers, c.Level, p.Streams)
	}
	if got := p.Sinks[0].Values["part_size"]; got != int64(16<<20) {
		t.Errorf("part_size = %v, want 16MiB", got)
	}
	if got := p.Sinks[0].Values["concurrency"]; got != int64(2) {
		t.Errorf("concurrency = %v, want 2", got)
	}
	if p.EndpointMemory == base.EndpointMemory || p.EndpointMemory == 0 {
		t.Errorf("the sink's memory did not follow part_size and concurrency: %d, before %d", p.EndpointMemory, base.EndpointMemory)
	}

	f, _ := pipefile.LoadSource("p.hcl", []byte(src), pipefile.Options{Now: corpusNow, Dir: ".", Schemas: reg})
	if _, d := plan.New(f, plan.Options{Host: corpusHost, Overrides: map[string]int64{"level": 99}}); !d.HasErrors() {
		t.Error("level 99 for zstd was accepted")
	}
}
