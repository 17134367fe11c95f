package compress

import (
	"context"
	"fmt"
	"io"

	"github.com/pierrec/lz4/v4"

	"github.com/pipebackup/pipe/engine"
)

func init() {
	register(&Codec{
		Name: "lz4", Ext: ".lz4", MinLevel: 1, MaxLevel: 9, DefaultLevel: 1,
		newEncoder: func(level int) (engine.Worker, error) {
			w := lz4.NewWriter(io.Discard)
			if err := w.Apply(lz4.ConcurrencyOption(1), lz4.BlockSizeOption(lz4.Block4Mb), lz4.CompressionLevelOption(lz4Level(level))); err != nil {
				return nil, err
			}
			return &lz4Encoder{w: w}, nil
		},
		decoder:   func(int) any { return lz4Decoder{} },
		encMemory: func(level, chunk int) int64 { return 8 << 20 },
		decMemory: func(chunk int) int64 { return 8 << 20 },
	})
}

// lz4Level maps 1-9 onto lz4's levels: 1 is the fast compressor, 2-9 the
// high-compression levels 1-8.
func lz4Level(level int) lz4.CompressionLevel {
	if level <= 1 {
		return lz4.Fast
	}
	return lz4.CompressionLevel(1 << (7 + level)) // lz4.Level1 is 1<<9
}

// lz4Encoder writes each chunk as one lz4 frame; lz4 -d reads concatenated
// frames as one stream.
type lz4Encoder struct{ w *lz4.Writer }

func (l *lz4Encoder) Map(dst, src []byte) ([]byte, error) {
	aw := &appendWriter{b: dst}
	l.w.Reset(aw)
	if _, err := l.w.Write(src); err != nil {
		return nil, err
	}
	if err := l.w.Close(); err != nil {
		return nil, err
	}
	return aw.b, nil
}

type lz4Decoder struct{}

func (lz4Decoder) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	r := lz4.NewReader(src)
	if err := r.Apply(lz4.ConcurrencyOption(1)); err != nil {
		return err
	}
	if _, err := io.Copy(dst, r); err != nil {
		return fmt.Errorf("corrupt lz4 data: %w", err)
	}
	return nil
}
