package engine

import (
	"context"
	"sync/atomic"
	"time"
)

// Meter counts what one position of a run does: the source, a stage or a
// sink. Times are summed over the position's goroutines.
type Meter struct {
	Name    string
	Label   string
	Workers int

	in, out    atomic.Int64
	busy       atomic.Int64 // ns spent working
	waitIn     atomic.Int64 // ns spent waiting for input
	blockedOut atomic.Int64 // ns spent waiting for a buffer or for the next position
	chunks     atomic.Int64 // chunks that arrived (the source: chunks it read)
	errs       atomic.Int64 // failures that started at this position
}

func (m *Meter) addBusy(since time.Time)    { m.busy.Add(int64(time.Since(since))) }
func (m *Meter) addWaitIn(since time.Time)  { m.waitIn.Add(int64(time.Since(since))) }
func (m *Meter) addBlocked(since time.Time) { m.blockedOut.Add(int64(time.Since(since))) }

// BytesIn returns the bytes the position consumed so far.
func (m *Meter) BytesIn() int64 { return m.in.Load() }

// BytesOut returns the bytes the position produced so far.
func (m *Meter) BytesOut() int64 { return m.out.Load() }

// Chunks returns the chunks that arrived at the position so far; for the
// source, the chunks it read.
func (m *Meter) Chunks() int64 { return m.chunks.Load() }

// Busy returns the time the position's goroutines spent working so far.
// A Streamer stage's times are added when each of its streams ends.
func (m *Meter) Busy() time.Duration { return time.Duration(m.busy.Load()) }

// WaitIn returns the time the position spent waiting for input so far.
func (m *Meter) WaitIn() time.Duration { return time.Duration(m.waitIn.Load()) }

// Blocked returns the time the position spent waiting for a free buffer or
// for the next position to take its output (backpressure) so far.
func (m *Meter) Blocked() time.Duration { return time.Duration(m.blockedOut.Load()) }

// Errors returns how many failures started at this position: a stream's
// first error, not the cancellations it caused elsewhere.
func (m *Meter) Errors() int64 { return m.errs.Load() }

// fail counts err against the position when it is the first failure of
// the stream: ctx is the stream's context, which every other position's
// error follows the first one's cancellation of.
func (m *Meter) fail(ctx context.Context, err error) error {
	if err != nil && ctx.Err() == nil {
		m.errs.Add(1)
	}
	return err
}

// BuffersInUse returns the chunk buffers taken from the run's pools now.
func (r *Run) BuffersInUse() int { return r.buffersInUse() }

// PeakBuffers returns the most chunk buffers in use at once so far.
func (r *Run) PeakBuffers() int { return r.peakBuffers() }

// MeterReport is a Meter's final reading.
type MeterReport struct {
	Name       string        `json:"name"`
	Label      string        `json:"label,omitempty"`
	Workers    int           `json:"workers"`
	BytesIn    int64         `json:"bytes_in"`
	BytesOut   int64         `json:"bytes_out"`
	Busy       time.Duration `json:"busy_ns"`
	WaitIn     time.Duration `json:"wait_input_ns"`
	BlockedOut time.Duration `json:"blocked_output_ns"`
	// Utilization is busy time over wall time × workers: 1 means the
	// position worked all the time on all its workers.
	Utilization float64 `json:"utilization"`
	// Throughput is bytes in per second of wall time; for the source,
	// which takes nothing in, bytes out.
	Throughput float64 `json:"throughput_bytes_per_sec"`
}

func (m *Meter) report(wall time.Duration) MeterReport {
	r := MeterReport{
		Name: m.Name, Label: m.Label, Workers: m.Workers,
		BytesIn: m.in.Load(), BytesOut: m.out.Load(),
		Busy: time.Duration(m.busy.Load()), WaitIn: time.Duration(m.waitIn.Load()),
		BlockedOut: time.Duration(m.blockedOut.Load()),
	}
	r.rate(wall)
	return r
}

// rate works out the report's utilization and throughput over wall.
func (r *MeterReport) rate(wall time.Duration) {
	if wall <= 0 {
		return
	}
	r.Utilization = float64(r.Busy) / (float64(wall) * float64(max(1, r.Workers)))
	n := r.BytesIn
	if n == 0 {
		n = r.BytesOut
	}
	r.Throughput = float64(n) / wall.Seconds()
}

// bottleneck names the position with the highest utilization.
func bottleneck(rs []MeterReport) string {
	best, name := -1.0, ""
	for _, r := range rs {
		if r.Utilization > best {
			best, name = r.Utilization, r.Name
		}
	}
	return name
}
