package engine

import "fmt"

// Layout is how a run's chunk buffers are split among the positions that
// produce chunks (the source and each stage that writes new data). Chunks
// take Σ Buffers × BufferSize over the positions; State is what stages keep
// besides; Sinks is what sinks buffer on their own; Total is the run's
// memory budget.
type Layout struct {
	Positions []Position
	Buffers   int
	Chunks    int64
	State     int64
	Sinks     int64
	Total     int64
}

// Position is one producer of chunks and the buffers it owns.
type Position struct {
	Name       string
	Buffers    int
	BufferSize int
	// unit is the payload size of the chunks this position cuts or fills.
	unit int
}

// Layout computes the buffer layout of the job. Each position gets enough
// buffers to keep its workers and the streams that run at once busy, plus
// Depth queued chunks per stream. When Job.Buffers is set, the same shares
// are scaled to that total; it is an error if the total is below one buffer
// per position.
func (j *Job) Layout() (Layout, error) {
	p, d := max(j.Parallel, 1), max(j.Depth, 1)
	var l Layout
	nextWorkers := 1
	if len(j.Stages) > 0 {
		if _, ok := j.Stages[0].Proc.(Mapper); ok {
			nextWorkers = j.Stages[0].Workers
		}
	}
	l.Positions = append(l.Positions, Position{Name: "source", Buffers: p*(d+1) + nextWorkers, BufferSize: j.ChunkSize, unit: j.ChunkSize})
	cur := j.ChunkSize // the largest payload arriving at the next position
	for _, s := range j.Stages {
		l.State += s.Shared
		bound := s.Bound
		if bound == nil {
			bound = func(n int) int { return n }
		}
		switch s.Proc.(type) {
		case Mapper:
			unit := cur
			if s.ChunkSize > 0 {
				unit = s.ChunkSize
			}
			if s.cuts(cur) {
				l.Positions = append(l.Positions, Position{Name: s.Name + " input", Buffers: s.Workers + p, BufferSize: bound(unit), unit: unit})
			}
			l.Positions = append(l.Positions, Position{Name: s.Name, Buffers: 2*s.Workers + p*d, BufferSize: bound(unit), unit: unit})
			l.State += int64(s.Workers) * s.Memory
			cur = bound(unit)
		case Streamer:
			l.Positions = append(l.Positions, Position{Name: s.Name, Buffers: p * (d + 1), BufferSize: j.ChunkSize, unit: j.ChunkSize})
			l.State += int64(p) * s.Memory
			cur = j.ChunkSize
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
	for _, pos := range l.Positions {
		l.Chunks += int64(pos.Buffers) * int64(pos.BufferSize)
	}
	for _, s := range j.Sinks {
		l.Sinks += s.Memory
	}
	l.Total = l.Chunks + l.State + l.Sinks
	return l, nil
}

// cuts reports whether a Mapper stage cuts its own units out of the byte
// stream: a Splitter always does; any other Mapper does when its chunk size
// differs from that of the chunks arriving.
func (s *Stage) cuts(arriving int) bool {
	if _, ok := s.Proc.(Splitter); ok {
		return true
	}
	return s.ChunkSize > 0 && s.ChunkSize != arriving
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
