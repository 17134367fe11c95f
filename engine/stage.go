package engine

import (
	"context"
	"errors"
	"io"
)

// Stage is one in-process step between a source and its sinks.
type Stage struct {
	// Name is the stage as the pipeline file calls it ("compress").
	Name string
	// Label says what it does, for plans and reports ("zstd level 3").
	Label string
	// Proc does the work: a Mapper, a Streamer or an Observer.
	Proc any
	// Workers is the number of Mapper workers, shared by all streams of a
	// run. Streamers and Observers run once per stream.
	Workers int
	// ChunkSize is the size of the units a Mapper works on (a compressor's
	// frame size); 0 means the chunks as they arrive. For a Splitter it is
	// the largest unit result expected.
	ChunkSize int
	// Bound returns the largest buffer the stage needs when chunks hold n
	// bytes (a compressor's worst-case output, say). nil means n.
	Bound func(n int) int
	// Memory is the state one worker (Mapper) or one stream (Streamer)
	// keeps besides chunk buffers, for the memory budget.
	Memory int64
	// Shared is the state the stage keeps once per run besides (an
	// index, workers of its own), for the memory budget.
	Shared int64
}

// Mapper is a stage whose units are independent of each other, so several
// workers can process the chunks of one stream at once (compressing each
// chunk as an independent frame, say).
type Mapper interface {
	// NewWorker returns the state of one worker (one encoder, say). A
	// worker is used by one goroutine at a time.
	NewWorker() (Worker, error)
}

// Worker processes units for a Mapper.
type Worker interface {
	// Map transforms src and appends the result to dst, which has len 0
	// and the capacity Stage.Bound promised. It must not grow dst.
	Map(dst, src []byte) ([]byte, error)
}

// Splitter is implemented by a Mapper whose units are not the incoming
// chunks but pieces it finds in the byte stream (the frames of a zstd
// stream, say).
type Splitter interface {
	// NextUnit reads the next unit from r, appends it to buf and returns it.
	// It returns io.EOF, and no unit, at a clean end of the stream. When a
	// unit does not fit in cap(buf), or its result would not fit in one
	// buffer, it returns ErrUnitTooLarge with the bytes it consumed.
	NextUnit(r io.Reader, buf []byte) ([]byte, error)
	// Rest processes the remainder of the stream sequentially, from the
	// unit that did not fit to the end.
	Rest(ctx context.Context, dst io.Writer, src io.Reader) error
}

// ErrUnitTooLarge is returned by Splitter.NextUnit for a unit that must be
// processed sequentially.
var ErrUnitTooLarge = errors.New("unit too large for a buffer")

// Streamer is a stage that must see a stream in order (encryption, say).
type Streamer interface {
	// Stream reads the whole input from src and writes its output to dst.
	Stream(ctx context.Context, dst io.Writer, src io.Reader) error
}

// Observer is a stage that reads a stream without changing it (a digest).
type Observer interface {
	Observe(stream string) Observation
}

// Observation watches one stream.
type Observation interface {
	io.Writer
	// Finish is called after the last byte. Its result is reported per
	// stream (a digest, say); an error fails the stream (a digest that does
	// not match the expected one).
	Finish() (string, error)
}
