// Package stagetest runs stages through the real engine on in-memory data,
// for the tests of stage packages.
package stagetest

import (
	"context"
	"testing"
	"time"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/engine/enginetest"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Run moves every stream of data through stages with the given chunk size
// and returns what the sink received, or the run's error.
func Run(t testing.TB, stages []engine.Stage, chunk int, data map[string][]byte) (map[string][]byte, *engine.Result, error) {
	t.Helper()
	src := &enginetest.MemSource{Data: data}
	sink := enginetest.NewMemSink()
	j := &engine.Job{Source: src, Stages: stages, ChunkSize: chunk, Parallel: 2, Depth: 1,
		Sinks: []engine.Sink{{Name: "mem", Sink: sink}}}
	infos, err := src.Streams(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		j.Streams = append(j.Streams, engine.Stream{Name: in.Name, Size: in.Size,
			Objects: []sdk.Object{{Key: in.Name, Stream: in.Name, Size: -1}}})
	}
	r, err := engine.New(j)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := r.Run(ctx)
	return sink.Objects, res, err
}
