package engine

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pipebackup/pipe/engine/enginetest"
)

// TestRateLimitHoldsInTotal runs four streams at once through a pipeline
// limited at the source, then through a limited sink: the achieved rate,
// over all streams together, must be within ±10% of the limit (a limit
// per stream would let four times as much through).
func TestRateLimitHoldsInTotal(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for about 6 s")
	}
	const (
		limit   = 4 << 20 // bytes per second
		streams = 4
		each    = 3 << 20 // 12 MiB in all: 3 s at the limit
	)
	data := map[string][]byte{}
	for i := range streams {
		data[fmt.Sprintf("s%d", i)] = randBytes(uint64(10+i), each)
	}
	for _, scope := range []string{"pipeline", "sink"} {
		t.Run(scope, func(t *testing.T) {
			sink := enginetest.NewMemSink()
			j := job(&enginetest.MemSource{Data: data}, []Stage{{Name: "rot", Proc: rot{2}}}, 256<<10, sink)
			j.Parallel = streams
			if scope == "pipeline" {
				j.RateLimit = limit
			} else {
				j.Sinks[0].RateLimit = limit
			}
			res, _, err := run(t, j)
			if err != nil {
				t.Fatal(err)
			}
			wall := res.Finished.Sub(res.Started)
			achieved := float64(streams*each) / wall.Seconds()
			t.Logf("%s limit %d B/s: %d bytes in %v = %.0f B/s (%.3f× the limit)", scope, limit, streams*each, wall, achieved, achieved/limit)
			if achieved > 1.1*limit || achieved < 0.9*limit {
				t.Fatalf("achieved %.0f B/s with a limit of %d B/s over %d streams: not within ±10%%", achieved, limit, streams)
			}
			for k, want := range data {
				got, _ := sink.Get(k)
				if len(got) != len(want) {
					t.Fatalf("%s: %d bytes stored, want %d", k, len(got), len(want))
				}
			}
			// The time spent waiting for the limit is blocked time, not work.
			m := res.Meters[0]
			if scope == "sink" {
				m = res.Meters[len(res.Meters)-1]
			}
			if m.BlockedOut < wall/2 {
				t.Fatalf("%s: blocked %v of %v: the limit's waits are not counted as blocked", m.Name, m.BlockedOut, wall)
			}
		})
	}
}

// TestThrottlePieces checks the throttled read and write move every byte,
// in order, and end like io.ReadFull.
func TestThrottlePieces(t *testing.T) {
	th := newThrottle(1 << 30)
	src := randBytes(7, 3*th.piece+5)
	buf := make([]byte, len(src)+10)
	n, _, err := th.readFull(t.Context(), bytes.NewReader(src), buf)
	if n != len(src) || err == nil || !bytes.Equal(buf[:n], src) {
		t.Fatalf("readFull: %d bytes, %v; want %d bytes and io.ErrUnexpectedEOF", n, err, len(src))
	}
	if n, _, err := th.readFull(t.Context(), bytes.NewReader(nil), buf); n != 0 || err == nil || err.Error() != "EOF" {
		t.Fatalf("readFull of nothing: %d, %v; want 0, EOF", n, err)
	}
	var out bytes.Buffer
	if n, _, err := th.write(t.Context(), &out, src); n != len(src) || err != nil || !bytes.Equal(out.Bytes(), src) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if newThrottle(0) != nil {
		t.Fatal("a zero limit must mean no throttle")
	}
}

// TestThrottleCancel: a run cancelled while it waits for the limit ends
// with the cancellation, promptly.
func TestThrottleCancel(t *testing.T) {
	th := newThrottle(16 << 10) // 16 KiB/s: a 1 MiB read waits about a minute
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, _, err := th.readFull(ctx, bytes.NewReader(randBytes(1, 1<<20)), make([]byte, 1<<20))
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("readFull under a cancelled context: %v after %v", err, time.Since(start))
	}
}
