package plan

import (
	"github.com/pipebackup/pipe/engine"
)

// Job returns an engine job with the pipeline's stages and numbers; the
// caller adds the source, streams and sinks. Each stage's kind builds its
// engine stage (kinds.go). decodeCodec replaces a decompress stage's "auto"
// (zstd when empty, the largest layout), and frame is the largest frame a
// restore expects (0: the stage's chunk size).
func (p *Pipeline) Job(decodeCodec string, frame int) (*engine.Job, error) {
	j := &engine.Job{ChunkSize: p.ChunkSize, Parallel: p.Streams, Depth: p.Depth, Buffers: p.Buffers, RateLimit: p.Def.RateLimit}
	for _, s := range p.Stages {
		if s.Idle() {
			continue
		}
		st, ok, err := s.ops().stage(s, p, decodeCodec, frame)
		if err != nil {
			return nil, err
		}
		if ok {
			j.Stages = append(j.Stages, st)
		}
	}
	return j, nil
}
