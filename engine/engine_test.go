package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/engine/enginetest"
	"github.com/pipebackup/pipe/plugins/sdk"
)

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return b
}

// job builds a job from src through stages into sinks, one object per
// stream per sink, keyed by stream name.
func job(src *enginetest.MemSource, stages []Stage, chunk int, sinks ...*enginetest.MemSink) *Job {
	j := &Job{Source: src, Stages: stages, ChunkSize: chunk, Parallel: 3, Depth: 1}
	for i, s := range sinks {
		j.Sinks = append(j.Sinks, Sink{Name: fmt.Sprintf("mem%d", i), Sink: s})
	}
	infos, _ := src.Streams(context.Background())
	for _, in := range infos {
		st := Stream{Name: in.Name, Size: in.Size}
		for range sinks {
			st.Objects = append(st.Objects, sdk.Object{Key: in.Name, Stream: in.Name, Size: in.Size})
		}
		j.Streams = append(j.Streams, st)
	}
	return j
}

func run(t *testing.T, j *Job) (*Result, *Run, error) {
	t.Helper()
	r, err := New(j)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.Run(ctx)
	return res, r, err
}

func sizes(chunk int) map[string][]byte {
	return map[string][]byte{
		"empty":        {},
		"one":          {42},
		"chunk":        randBytes(1, chunk),
		"chunk+1":      randBytes(2, chunk+1),
		"many":         randBytes(3, 37*chunk+13),
		"sub/dir/file": randBytes(4, chunk/2),
	}
}

func TestRoundTripSizes(t *testing.T) {
	const chunk = 4096
	stageSets := map[string][]Stage{
		"none":     nil,
		"mapper":   {{Name: "frame", Proc: framer{}, Workers: 3, Bound: func(n int) int { return n + 4 }}},
		"streamer": {{Name: "rot", Proc: rot{by: 7}}},
		"observer": {{Name: "checksum", Proc: digest{}}},
		"all": {
			{Name: "frame", Proc: framer{}, Workers: 2, Bound: func(n int) int { return n + 4 }},
			{Name: "rot", Proc: rot{by: 1}},
			{Name: "rot2", Proc: rot{by: 255}},
			{Name: "unframe", Proc: unframer{}, Workers: 2, Bound: func(n int) int { return n + 4 }},
			{Name: "checksum", Proc: digest{}},
		},
	}
	for name, stages := range stageSets {
		t.Run(name, func(t *testing.T) {
			data := sizes(chunk)
			sink := enginetest.NewMemSink()
			res, r, err := run(t, job(&enginetest.MemSource{Data: data}, stages, chunk, sink))
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range data {
				got, ok := sink.Get(k)
				if !ok {
					t.Fatalf("%s: not committed", k)
				}
				switch name {
				case "none", "observer", "all":
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: got %d bytes, want %d (equal prefix %v)", k, len(got), len(want), bytes.HasPrefix(want, got))
					}
				case "mapper":
					if frames := (len(want) + chunk - 1) / chunk; len(got) != len(want)+4*max(frames, 1) {
						t.Fatalf("%s: %d framed bytes for %d bytes in %d frames", k, len(got), len(want), frames)
					}
				case "streamer":
					for i := range want {
						if got[i] != want[i]+7 {
							t.Fatalf("%s: byte %d", k, i)
						}
					}
				}
			}
			if n := r.buffersInUse(); n != 0 {
				t.Fatalf("%d buffers still in use after the run", n)
			}
			if res.PeakBuffers > res.Layout.Buffers {
				t.Fatalf("peak %d buffers > layout %d", res.PeakBuffers, res.Layout.Buffers)
			}
			for _, s := range res.Streams {
				if !s.Committed || s.Read != int64(len(data[s.Name])) {
					t.Fatalf("stream %s: committed=%v read=%d", s.Name, s.Committed, s.Read)
				}
				if name == "observer" || name == "all" {
					sum := sha256.Sum256(data[s.Name])
					if s.Observed["checksum"] != hex.EncodeToString(sum[:]) {
						t.Fatalf("stream %s: digest %q", s.Name, s.Observed["checksum"])
					}
				}
			}
		})
	}
}

// Workers that finish out of order must not reorder a stream.
func TestMapperKeepsOrder(t *testing.T) {
	const chunk = 512
	rng := rand.New(rand.NewPCG(9, 9))
	var mu = make(chan struct{}, 1)
	delay := func() {
		mu <- struct{}{}
		d := time.Duration(rng.IntN(300)) * time.Microsecond
		<-mu
		time.Sleep(d)
	}
	data := map[string][]byte{"a": randBytes(5, 300*chunk+1), "b": randBytes(6, 200*chunk)}
	stages := []Stage{
		{Name: "frame", Proc: framer{delay: delay}, Workers: 4, Bound: func(n int) int { return n + 4 }},
		{Name: "unframe", Proc: unframer{}, Workers: 3, Bound: func(n int) int { return n + 4 }},
	}
	sink := enginetest.NewMemSink()
	if _, _, err := run(t, job(&enginetest.MemSource{Data: data}, stages, chunk, sink)); err != nil {
		t.Fatal(err)
	}
	for k, want := range data {
		if got, _ := sink.Get(k); !bytes.Equal(got, want) {
			t.Fatalf("%s differs", k)
		}
	}
}

// Frames larger than a buffer fall back to sequential processing.
func TestSplitterFallback(t *testing.T) {
	data := map[string][]byte{"big": randBytes(7, 100_000), "small": randBytes(8, 10)}
	framed := enginetest.NewMemSink()
	if _, _, err := run(t, job(&enginetest.MemSource{Data: data}, []Stage{{Name: "frame", Proc: framer{}, Workers: 2, Bound: func(n int) int { return n + 4 }}}, 30_000, framed)); err != nil {
		t.Fatal(err)
	}
	out := enginetest.NewMemSink()
	src := &enginetest.MemSource{Data: framed.Objects}
	// Chunks of 1000 bytes: every 30,000-byte frame is too large.
	if _, _, err := run(t, job(src, []Stage{{Name: "unframe", Proc: unframer{}, Workers: 2}}, 1000, out)); err != nil {
		t.Fatal(err)
	}
	for k, want := range data {
		if got, _ := out.Get(k); !bytes.Equal(got, want) {
			t.Fatalf("%s: got %d bytes, want %d", k, len(got), len(want))
		}
	}
}

func TestFailuresLeaveNothing(t *testing.T) {
	const chunk = 1024
	frame := Stage{Name: "frame", Proc: framer{}, Workers: 2, Bound: func(n int) int { return n + 4 }}
	cases := map[string]struct {
		src     *enginetest.MemSource
		sink    func(*enginetest.MemSink)
		stages  []Stage
		wantErr string
	}{
		"source fails mid-stream": {
			src:     &enginetest.MemSource{Data: map[string][]byte{"a": randBytes(1, 10*chunk), "b": randBytes(2, 50*chunk)}, FailAt: map[string]int{"b": 20 * chunk}},
			stages:  []Stage{frame},
			wantErr: `stream "b": source: reading at byte 20480: disk on fire`,
		},
		"sink fails": {
			src:     &enginetest.MemSource{Data: map[string][]byte{"a": randBytes(1, 10*chunk), "b": randBytes(2, 50*chunk)}},
			sink:    func(s *enginetest.MemSink) { s.FailWrite["b"] = true; s.FailAfter = 5 * chunk },
			stages:  []Stage{frame, {Name: "rot", Proc: rot{1}}},
			wantErr: `stream "b": sink mem0: writing "b": no space left on device`,
		},
		"commit fails": {
			src:     &enginetest.MemSource{Data: map[string][]byte{"a": randBytes(1, 10*chunk), "b": randBytes(2, 5*chunk)}},
			sink:    func(s *enginetest.MemSink) { s.FailCommit["b"] = true },
			stages:  []Stage{frame},
			wantErr: `sink mem0: committing "b": connection reset while completing the upload`,
		},
		"mapper fails": {
			src:     &enginetest.MemSource{Data: map[string][]byte{"a": bytes.Repeat([]byte{1}, 30*chunk), "b": append(bytes.Repeat([]byte{1}, 30*chunk), 9)}},
			stages:  []Stage{frame, {Name: "unframe", Proc: unframer{failOn: 9}, Workers: 2}},
			wantErr: "unframe: bad byte",
		},
		"observer fails": {
			src:     &enginetest.MemSource{Data: map[string][]byte{"a": {1, 2, 3}, "b": randBytes(3, 5*chunk)}},
			stages:  []Stage{{Name: "checksum", Proc: digest{want: map[string]string{"b": strings.Repeat("0", 64)}}}},
			wantErr: "checksum: digest mismatch",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			sink := enginetest.NewMemSink()
			if tc.sink != nil {
				tc.sink(sink)
			}
			j := job(tc.src, tc.stages, chunk, sink)
			j.Parallel = 1 // "a" commits before "b" fails
			_, r, err := run(t, j)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
			if len(sink.Objects) != 0 || len(sink.Pending) != 0 {
				t.Fatalf("left behind: objects %d, pending %d", len(sink.Objects), len(sink.Pending))
			}
			if len(sink.Removed) != 1 || sink.Removed[0] != "a" {
				t.Fatalf("removed %v, want [a]", sink.Removed)
			}
			if sink.Aborted != 1 {
				t.Fatalf("aborted %d writers, want 1", sink.Aborted)
			}
			_ = r
		})
	}
}

func TestFinishFailureTakesBack(t *testing.T) {
	sink := enginetest.NewMemSink()
	j := job(&enginetest.MemSource{Data: map[string][]byte{"a": {1}, "b": {2}}}, nil, 16, sink)
	j.Finish = func(context.Context, *Result) error { return errors.New("manifest refused") }
	_, _, err := run(t, j)
	if err == nil || !strings.Contains(err.Error(), "manifest refused") {
		t.Fatalf("err = %v", err)
	}
	if len(sink.Objects) != 0 {
		t.Fatalf("objects left: %v", sink.Objects)
	}
}

// A sink that does not accept data stops the source once every buffer is in
// flight: memory is bounded by the layout, not by the input.
func TestBackpressure(t *testing.T) {
	const chunk = 1024
	data := map[string][]byte{"big": randBytes(1, 5000*chunk)}
	sink := enginetest.NewMemSink()
	sink.Gate = make(chan struct{})
	stages := []Stage{
		{Name: "frame", Proc: framer{}, Workers: 2, Bound: func(n int) int { return n + 4 }},
		{Name: "rot", Proc: rot{3}},
	}
	j := job(&enginetest.MemSource{Data: data}, stages, chunk, sink)
	r, err := New(j)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := r.Run(context.Background()); done <- err }()
	time.Sleep(200 * time.Millisecond)
	read := r.Source().BytesOut()
	limit := int64(r.Layout().Buffers+1) * chunk
	if read == 0 || read > limit {
		t.Fatalf("source read %d bytes while the sink was stalled; the layout holds at most %d", read, limit)
	}
	time.Sleep(100 * time.Millisecond)
	if again := r.Source().BytesOut(); again != read {
		t.Fatalf("source kept reading (%d → %d) while the sink was stalled", read, again)
	}
	close(sink.Gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got, _ := sink.Get("big"); len(got) != len(data["big"])+4*5000 {
		t.Fatalf("got %d bytes", len(got))
	}
	for _, m := range r.Meters() {
		if m.Name == "source" && m.blockedOut.Load() == 0 {
			t.Fatal("source never blocked")
		}
	}
}

func TestCancel(t *testing.T) {
	src := &enginetest.MemSource{Data: map[string][]byte{"a": randBytes(1, 1<<20), "b": randBytes(2, 1<<20)}, Block: make(chan struct{})}
	sink := enginetest.NewMemSink()
	j := job(src, []Stage{{Name: "frame", Proc: framer{}, Workers: 2, Bound: func(n int) int { return n + 4 }}}, 1024, sink)
	r, err := New(j)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := r.Run(ctx); done <- err }()
	go func() {
		for i := 0; i < 50; i++ {
			src.Block <- struct{}{}
		}
		cancel()
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not stop after cancel")
	}
	if len(sink.Objects) != 0 || len(sink.Pending) != 0 {
		t.Fatalf("left behind: %d objects, %d pending", len(sink.Objects), len(sink.Pending))
	}
}

func TestFanOut(t *testing.T) {
	data := sizes(2048)
	a, b := enginetest.NewMemSink(), enginetest.NewMemSink()
	if _, _, err := run(t, job(&enginetest.MemSource{Data: data}, []Stage{{Name: "rot", Proc: rot{2}}}, 2048, a, b)); err != nil {
		t.Fatal(err)
	}
	for k := range data {
		x, _ := a.Get(k)
		y, _ := b.Get(k)
		if !bytes.Equal(x, y) || len(x) != len(data[k]) {
			t.Fatalf("%s: sinks differ", k)
		}
	}
}

func TestLayout(t *testing.T) {
	j := &Job{Source: &enginetest.MemSource{}, Sinks: []Sink{{Name: "m", Sink: enginetest.NewMemSink(), Memory: 1000}}, ChunkSize: 1 << 20, Parallel: 2, Depth: 1,
		Stages: []Stage{
			{Name: "compress", Proc: framer{}, Workers: 2, Bound: func(n int) int { return n + n/100 }, Memory: 5},
			{Name: "encrypt", Proc: rot{}, Memory: 7},
			{Name: "checksum", Proc: digest{}},
		}}
	l, err := j.Layout()
	if err != nil {
		t.Fatal(err)
	}
	// source 2*(1+1)+2, compress 2*2+2*1, encrypt 2*(1+1)
	if got := []int{l.Positions[0].Buffers, l.Positions[1].Buffers, l.Positions[2].Buffers}; fmt.Sprint(got) != "[6 6 4]" {
		t.Fatalf("buffers %v", got)
	}
	if got := fmt.Sprint(l.Positions[0].BufferSize, l.Positions[1].BufferSize, l.Positions[2].BufferSize); got != fmt.Sprint(1<<20, (1<<20)+(1<<20)/100, 1<<20) {
		t.Fatalf("buffer sizes %s", got)
	}
	if want := int64(10<<20) + 6*int64((1<<20)+(1<<20)/100) + 2*5 + 2*7 + 1000; l.Total != want {
		t.Fatalf("total %d, want %d", l.Total, want)
	}
	j.Buffers = 8
	if l, err = j.Layout(); err != nil || l.Buffers != 8 || l.Positions[0].Buffers+l.Positions[1].Buffers+l.Positions[2].Buffers != 8 {
		t.Fatalf("scaled layout %+v, %v", l.Positions, err)
	}
	j.Buffers = 2
	if _, err = j.Layout(); err == nil || !strings.Contains(err.Error(), "buffers = 2 is too few") {
		t.Fatalf("err = %v", err)
	}
}

// A Mapper with its own chunk size re-cuts the stream: 1000-byte source
// chunks become 300-byte frames.
func TestMapperChunkSize(t *testing.T) {
	data := map[string][]byte{"a": randBytes(1, 10_000), "empty": {}}
	sink := enginetest.NewMemSink()
	stages := []Stage{{Name: "frame", Proc: framer{}, Workers: 2, ChunkSize: 300, Bound: func(n int) int { return n + 4 }}}
	res, r, err := run(t, job(&enginetest.MemSource{Data: data}, stages, 1000, sink))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := sink.Get("a"); len(got) != 10_000+4*34 {
		t.Fatalf("%d bytes: want 34 frames of at most 300 bytes", len(got))
	}
	if got, _ := sink.Get("empty"); len(got) != 4 {
		t.Fatalf("empty stream: %d bytes, want one empty frame", len(got))
	}
	if res.Layout.Positions[1].Name != "frame input" || res.Layout.Positions[1].BufferSize != 304 {
		t.Fatalf("positions %+v", res.Layout.Positions)
	}
	if r.buffersInUse() != 0 {
		t.Fatal("buffers leaked")
	}
}

// A unit that fails early in a long stream stops the run at once: the
// dispatcher must not wait for buffers held by results nobody takes, and
// the failure must not read the rest of the stream first.
func TestEarlyFailureStopsPromptly(t *testing.T) {
	const chunk = 1024
	big := bytes.Repeat([]byte{1}, 20000*chunk)
	big[3*chunk] = 9 // the fourth unit fails
	for name, stages := range map[string][]Stage{
		"mapper": {
			{Name: "frame", Proc: framer{}, Workers: 2, Bound: func(n int) int { return n + 4 }},
			{Name: "unframe", Proc: unframer{failOn: 9}, Workers: 2},
		},
		"streamer": {{Name: "fail", Proc: failAfter{n: 3 * chunk}}},
	} {
		t.Run(name, func(t *testing.T) {
			src := &enginetest.MemSource{Data: map[string][]byte{"s": big}}
			sink := enginetest.NewMemSink()
			j := job(src, stages, chunk, sink)
			r, err := New(j)
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { _, err := r.Run(context.Background()); done <- err }()
			select {
			case err := <-done:
				if err == nil {
					t.Fatal("no error")
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the run hangs after an early failure")
			}
			if read := r.Source().BytesOut(); read > int64(len(big))/2 {
				t.Fatalf("the source read %d of %d bytes after the failure at byte %d", read, len(big), 3*chunk)
			}
		})
	}
}

// failAfter is a Streamer that fails after reading n bytes.
type failAfter struct{ n int }

func (f failAfter) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	if _, err := io.CopyN(dst, src, int64(f.n)); err != nil {
		return err
	}
	return errors.New("bad data")
}

// The run's error is the first stream's, with the errors of other streams
// that are not just the cancellation it caused (a commit whose outcome the
// store could not tell must not go unsaid).
func TestWithOthers(t *testing.T) {
	first := fmt.Errorf("stream %q: %w", "a", errors.New("disk full"))
	caused := fmt.Errorf("stream %q: sink: %w", "b", first) // context.Cause of the group
	cancelled := fmt.Errorf("stream %q: %w", "c", context.Canceled)
	lost := fmt.Errorf("stream %q: %w", "d", errors.New("the object may be stored nevertheless"))
	err := withOthers(first, []error{first, caused, cancelled, lost})
	if !errors.Is(err, first) || !errors.Is(err, lost) || strings.Contains(err.Error(), `stream "b"`) || strings.Contains(err.Error(), `stream "c"`) {
		t.Fatalf("err = %v", err)
	}
	if err := withOthers(first, []error{first, cancelled}); err != first {
		t.Fatalf("err = %v, want the first error alone", err)
	}
}

// With Isolate, a stream that fails is aborted and reported, and the
// others commit, whatever stage it failed in: shared workers go on serving
// the other streams.
func TestIsolate(t *testing.T) {
	const chunk = 1024
	frame := Stage{Name: "frame", Proc: framer{}, Workers: 2, Bound: func(n int) int { return n + 4 }}
	no9 := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte{9}, []byte{8}) } // 9 fails the mapper
	data := map[string][]byte{
		"a":      no9(randBytes(1, 30*chunk)),
		"src":    no9(randBytes(2, 40*chunk)),
		"mapper": append(bytes.Repeat([]byte{1}, 30*chunk), 9),
		"sink":   no9(randBytes(4, 20*chunk)),
		"z":      no9(randBytes(5, 3*chunk)),
	}
	src := &enginetest.MemSource{Data: data, FailAt: map[string]int{"src": 10 * chunk}}
	sink := enginetest.NewMemSink()
	sink.FailWrite["sink"] = true
	sink.FailAfter = 2 * chunk
	j := job(src, []Stage{frame, {Name: "unframe", Proc: unframer{failOn: 9}, Workers: 2}}, chunk, sink)
	j.Isolate = true
	finished := false
	j.Finish = func(_ context.Context, res *Result) error {
		finished = true
		return nil
	}
	res, _, err := run(t, j)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if !finished {
		t.Fatal("Finish did not run")
	}
	want := map[string]string{"src": "disk on fire", "mapper": "bad byte", "sink": "no space left on device"}
	for _, s := range res.Streams {
		switch msg, bad := want[s.Name]; {
		case bad && (s.Err == nil || !strings.Contains(s.Err.Error(), msg) || s.Committed):
			t.Errorf("%s: committed %v, err %v, want %q", s.Name, s.Committed, s.Err, msg)
		case !bad && (s.Err != nil || !s.Committed):
			t.Errorf("%s: committed %v, err %v", s.Name, s.Committed, s.Err)
		case !bad && !bytes.Equal(sink.Objects[s.Name], data[s.Name]):
			t.Errorf("%s: %d bytes stored, want %d", s.Name, len(sink.Objects[s.Name]), len(data[s.Name]))
		}
	}
	for name := range want {
		if _, ok := sink.Objects[name]; ok {
			t.Errorf("%s was stored although it failed", name)
		}
	}
	if len(sink.Pending) != 0 {
		t.Errorf("pending: %v", sink.Pending)
	}
}
