package engine

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Job is everything a run needs, resolved to concrete numbers.
type Job struct {
	Source  sdk.Source
	Streams []Stream
	Stages  []Stage
	Sinks   []Sink
	// ChunkSize is the payload of one chunk as the source reads it.
	ChunkSize int
	// Parallel is the number of streams that run at once.
	Parallel int
	// Depth is how many chunks may queue at each position per stream
	// beyond the ones being worked on.
	Depth int
	// Buffers is the total number of chunk buffers of the run; 0 means
	// the default layout (see Layout).
	Buffers int
	// RateLimit is the most bytes per second the source yields, over all
	// streams together; 0 means no limit.
	RateLimit int64
	// Finish runs after every stream committed and every sink flushed,
	// before the run counts as a success (the manifest is written here). If
	// it fails, the run fails and takes back its objects.
	Finish func(ctx context.Context, res *Result) error
	// Isolate keeps streams apart: a stream that fails is aborted and
	// reported in its StreamResult, and the others go on and commit (a
	// cluster's databases, a verification's objects). The run fails only
	// when nothing can go on (its context ends, a flush or Finish fails);
	// Finish sees which streams committed.
	Isolate bool
}

// Stream is one stream of a run.
type Stream struct {
	// Name is the stream's name in the source, passed to Source.Open.
	Name string
	// Size is the source size in bytes, or -1.
	Size int64
	// Objects holds one object per sink, in the order of Job.Sinks.
	Objects []sdk.Object
	// Checks watch the bytes as the source yields them, before any stage
	// (a restore verifies the stored digest here).
	Checks []Observation
}

// Sink is one destination of every stream.
type Sink struct {
	// Name identifies the sink in reports and errors ("fs", "s3#2").
	Name string
	Sink sdk.Sink
	// Memory is what the sink buffers on its own (multipart parts), for
	// the memory budget.
	Memory int64
	// RateLimit is the most bytes per second the sink is given, over all
	// streams together; 0 means no limit.
	RateLimit int64
}

// Result describes a finished run.
type Result struct {
	Started  time.Time
	Finished time.Time
	Streams  []StreamResult
	Meters   []MeterReport
	// Bottleneck names the position that limited the run.
	Bottleneck string
	// PeakBuffers is the largest number of chunk buffers in use at once.
	PeakBuffers int
	Layout      Layout
}

// Join makes one result of results of runs made one after the other
// (a chain's restore, run by run): every stream, the meters' bytes and
// times added up, from the first start to the last finish. Meters join
// only when every run has the same positions.
func Join(rs []*Result) *Result {
	if len(rs) == 0 {
		return nil
	}
	out := *rs[0]
	out.Streams = nil
	out.Meters = slices.Clone(rs[0].Meters)
	for i, res := range rs {
		out.Streams = append(out.Streams, res.Streams...)
		out.Finished = res.Finished
		out.PeakBuffers = max(out.PeakBuffers, res.PeakBuffers)
		if i == 0 || len(res.Meters) != len(out.Meters) {
			continue
		}
		for j, m := range res.Meters {
			o := &out.Meters[j]
			o.BytesIn += m.BytesIn
			o.BytesOut += m.BytesOut
			o.Busy += m.Busy
			o.WaitIn += m.WaitIn
			o.BlockedOut += m.BlockedOut
		}
	}
	for j := range out.Meters {
		out.Meters[j].rate(out.Finished.Sub(out.Started))
	}
	return &out
}

// StreamResult describes one stream of a finished run.
type StreamResult struct {
	Name string
	// Read is the number of bytes the source yielded.
	Read int64
	// Written is the number of bytes each sink received (the stored size).
	Written int64
	// Observed holds each Observer's result, by stage name.
	Observed map[string]string
	// Objects are the committed objects, one per sink.
	Objects []sdk.Object
	// Committed is false when the stream did not finish.
	Committed bool
	// Err is why the stream failed, in a run with Isolate set.
	Err error `json:"-"`
}

func (j *Job) validate() error {
	if j.Source == nil {
		return fmt.Errorf("engine: job without a source")
	}
	if len(j.Sinks) == 0 {
		return fmt.Errorf("engine: job without a sink")
	}
	if j.ChunkSize <= 0 {
		return fmt.Errorf("engine: chunk size %d must be positive", j.ChunkSize)
	}
	if j.Parallel <= 0 {
		return fmt.Errorf("engine: parallel streams %d must be positive", j.Parallel)
	}
	for i, st := range j.Streams {
		if len(st.Objects) != len(j.Sinks) {
			return fmt.Errorf("engine: stream %q has %d objects for %d sinks", st.Name, len(st.Objects), len(j.Sinks))
		}
		_ = i
	}
	for _, s := range j.Stages {
		switch s.Proc.(type) {
		case Mapper:
			if s.Workers <= 0 {
				return fmt.Errorf("engine: stage %s: workers %d must be positive", s.Name, s.Workers)
			}
		case Streamer, Observer:
			if s.ChunkSize > 0 {
				return fmt.Errorf("engine: stage %s: only chunk-parallel stages have a chunk size", s.Name)
			}
		default:
			return fmt.Errorf("engine: stage %s: %T is neither a Mapper, a Streamer nor an Observer", s.Name, s.Proc)
		}
	}
	return nil
}
