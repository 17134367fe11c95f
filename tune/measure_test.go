package tune

import (
	"testing"
	"time"

	"github.com/pipebackup/pipe/engine"
)

// A variant's runs add up: bytes over the total time, busy time over the
// total time × workers.
func TestMeasureRuns(t *testing.T) {
	run := func(read, stored int64, busy time.Duration) trial {
		return trial{wall: time.Second, res: &engine.Result{Meters: []engine.MeterReport{
			{Name: "source", Workers: 1, BytesOut: read, Busy: busy / 4},
			{Name: "compress", Workers: 2, BytesIn: read, BytesOut: stored, Busy: busy},
			{Name: "sink fs", Workers: 1, BytesIn: stored, Busy: busy / 8},
		}}}
	}
	row := measure(Variant{Name: "v"}, 1<<20, []trial{run(300, 100, 2*time.Second), run(100, 50, time.Second)}, false)
	if row.Runs != 2 || row.Seconds != 2 || row.ReadBytes != 400 || row.StoredBytes != 150 || row.ReadPerSec != 200 || row.StoredPerSec != 75 {
		t.Fatalf("row %+v", row)
	}
	if c := row.Stages[1]; c.Utilization != 0.75 || row.Bottleneck != "compress" {
		t.Fatalf("compress utilization %v (want 3s busy / (2s × 2) = 0.75), bottleneck %s", c.Utilization, row.Bottleneck)
	}
}

// A run cut by --duration is measured up to the cut, not to its end.
func TestRunWall(t *testing.T) {
	start := time.Now()
	res := &engine.Result{Started: start, Finished: start.Add(3 * time.Second)}
	if w := runWall(res, true, start.Add(2*time.Second)); w != 2*time.Second {
		t.Errorf("cut at 2s: %s", w)
	}
	if w := runWall(res, false, start.Add(2*time.Second)); w != 3*time.Second {
		t.Errorf("not cut: %s", w)
	}
}
