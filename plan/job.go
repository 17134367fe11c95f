package plan

import (
	"fmt"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/stages/checksum"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
)

// Job returns an engine job with the pipeline's stages and numbers; the
// caller adds the source, streams and sinks. decodeCodec replaces a
// decompress stage's "auto" (zstd when empty, the largest layout), and
// frame is the largest frame a restore expects (0: the stage's chunk size).
func (p *Pipeline) Job(decodeCodec string, frame int) (*engine.Job, error) {
	j := &engine.Job{ChunkSize: p.ChunkSize, Parallel: p.Streams, Depth: p.Depth, Buffers: p.Buffers, RateLimit: p.Def.RateLimit}
	for _, s := range p.Stages {
		switch s.Type {
		case "compress":
			if s.Codec == "none" {
				continue
			}
			c, _ := compress.Lookup(s.Codec)
			st, err := c.Stage(s.Level, s.Workers, s.ChunkSize)
			if err != nil {
				return nil, fmt.Errorf("compress: %w", err)
			}
			j.Stages = append(j.Stages, st)
		case "decompress":
			codec := s.Codec
			if codec == "auto" {
				codec = decodeCodec
				if codec == "" {
					codec = "zstd"
				}
			}
			if codec == "none" {
				continue
			}
			c, ok := compress.Lookup(codec)
			if !ok {
				return nil, fmt.Errorf("decompress: unknown codec %q", codec)
			}
			f := s.ChunkSize
			if frame > 0 && !s.Explicit["chunk_size"] {
				f = max(frame, p.ChunkSize)
			}
			j.Stages = append(j.Stages, c.DecompressStage(s.Workers, f))
		case "encrypt":
			j.Stages = append(j.Stages, encrypt.Stage(s.Keys))
		case "decrypt":
			j.Stages = append(j.Stages, encrypt.DecryptStage(s.Keys))
		case "checksum":
			j.Stages = append(j.Stages, checksum.Stage())
		}
	}
	return j, nil
}
