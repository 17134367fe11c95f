package engine

import "fmt"

// Layout is how a run's chunk buffers are split among the positions that
// produce chunks (the source and each stage that writes new data). Memory
// for chunks is BufferSize × Buffers; State is what stages and sinks keep
// besides; Total is the run's memory budget.
type Layout struct {
	ChunkSize  int
	BufferSize int
	Positions  []Position
	Buffers    int
	Chunks     int64
	State      int64
	Sinks      int64
	Total      int64
}

// Position is one producer of chunks and the buffers it owns.
type Position struct {
	Name    string
	Buffers int
	// Min is the fewest buffers the position can work with.
	Min int
}

// Layout computes the buffer layout of the job. Each position gets enough
// buffers to keep its workers and the streams that run at once busy, plus
// Depth queued chunks per stream. When Job.Buffers is set, the same shares
// are scaled to that total; it is an error if the total is below one buffer
// per position.
func (j *Job) Layout() (Layout, error) {
	p, d := max(j.Parallel, 1), max(j.Depth, 1)
	l := Layout{ChunkSize: j.ChunkSize, BufferSize: j.ChunkSize}
	nextWorkers := 1
	if len(j.Stages) > 0 {
		if _, ok := j.Stages[0].Proc.(Mapper); ok {
			nextWorkers = j.Stages[0].Workers
		}
	}
	l.Positions = append(l.Positions, Position{Name: "source", Buffers: p*(d+1) + nextWorkers, Min: 1})
	for _, s := range j.Stages {
		if s.Bound != nil {
			l.BufferSize = max(l.BufferSize, s.Bound(j.ChunkSize))
		}
		switch s.Proc.(type) {
		case Mapper:
			if _, ok := s.Proc.(Splitter); ok {
				l.Positions = append(l.Positions, Position{Name: s.Name + " input", Buffers: s.Workers + p, Min: 1})
			}
			l.Positions = append(l.Positions, Position{Name: s.Name, Buffers: 2*s.Workers + p*d, Min: 1})
			l.State += int64(s.Workers) * s.Memory
		case Streamer:
			l.Positions = append(l.Positions, Position{Name: s.Name, Buffers: p * (d + 1), Min: 1})
			l.State += int64(p) * s.Memory
		case Observer:
			l.State += int64(p) * s.Memory
		}
	}
	for _, pos := range l.Positions {
		l.Buffers += pos.Buffers
	}
	if j.Buffers > 0 && j.Buffers != l.Buffers {
		if j.Buffers < len(l.Positions) {
			return l, fmt.Errorf("buffers = %d is too few: this pipeline has %d positions that produce chunks and needs at least one buffer each", j.Buffers, len(l.Positions))
		}
		scale(l.Positions, l.Buffers, j.Buffers)
		l.Buffers = j.Buffers
	}
	for _, s := range j.Sinks {
		l.Sinks += s.Memory
	}
	l.Chunks = int64(l.Buffers) * int64(l.BufferSize)
	l.Total = l.Chunks + l.State + l.Sinks
	return l, nil
}

// scale resizes the positions' buffers from a total of from to a total of
// to, keeping their proportions and at least one buffer each.
func scale(ps []Position, from, to int) {
	left := to
	for i := range ps {
		n := max(1, ps[i].Buffers*to/from)
		ps[i].Buffers = n
		left -= n
	}
	// Hand out (or take back) the rounding difference, source first.
	for i := 0; left != 0; i = (i + 1) % len(ps) {
		switch {
		case left > 0:
			ps[i].Buffers++
			left--
		case ps[i].Buffers > 1:
			ps[i].Buffers--
			left++
		}
	}
}
