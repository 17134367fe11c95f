package compress

import (
	"context"
	"fmt"
	"io"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/pgzip"

	"github.com/pipebackup/pipe/engine"
)

func init() {
	register(&Codec{
		Name: "gzip", Ext: ".gz", MinLevel: 1, MaxLevel: 9, DefaultLevel: 6,
		newEncoder: func(level int) (engine.Worker, error) {
			w, err := gzip.NewWriterLevel(io.Discard, level)
			if err != nil {
				return nil, err
			}
			return &gzipEncoder{w: w}, nil
		},
		decoder:   func(int) any { return gzipDecoder{} },
		encMemory: func(level, chunk int) int64 { return 1 << 20 },
		decMemory: func(chunk int) int64 { return 4 << 20 }, // pgzip read-ahead blocks
	})
}

// gzipEncoder writes each chunk as one gzip member; gzip readers (gzip -d,
// pigz, Go's compress/gzip) read concatenated members as one stream.
type gzipEncoder struct{ w *gzip.Writer }

func (g *gzipEncoder) Map(dst, src []byte) ([]byte, error) {
	aw := &appendWriter{b: dst}
	g.w.Reset(aw)
	if _, err := g.w.Write(src); err != nil {
		return nil, err
	}
	if err := g.w.Close(); err != nil {
		return nil, err
	}
	return aw.b, nil
}

// gzipDecoder inflates sequentially with pgzip, which decodes ahead of the
// reader on its own goroutine.
type gzipDecoder struct{}

func (gzipDecoder) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	r, err := pgzip.NewReader(src)
	if err != nil {
		return fmt.Errorf("not gzip data: %w", err)
	}
	defer r.Close()
	if _, err := io.Copy(dst, r); err != nil {
		return fmt.Errorf("corrupt gzip data: %w", err)
	}
	return nil
}
