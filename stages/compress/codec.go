package compress

import (
	"fmt"
	"sort"
	"strings"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// Codec describes one compression format.
type Codec struct {
	Name string
	// Ext is the file extension the codec adds to a stream's name.
	Ext string
	// MinLevel, MaxLevel and DefaultLevel are in the codec's own scale
	// (zstd 1-22, gzip 1-9, lz4 1-9).
	MinLevel, MaxLevel, DefaultLevel int

	newEncoder func(level int) (engine.Worker, error)
	// decoder returns the decompress stage's processor.
	decoder func(workers int) any
	// encMemory and decMemory estimate one worker's state in bytes for a
	// chunk size.
	encMemory func(level, chunk int) int64
	decMemory func(chunk int) int64
}

var codecs = map[string]*Codec{}

func register(c *Codec) { codecs[c.Name] = c }

// Lookup returns the codec called name.
func Lookup(name string) (*Codec, bool) {
	c, ok := codecs[name]
	return c, ok
}

// Names lists the codecs, "none" included, for messages.
func Names() []string {
	names := []string{"none"}
	for n := range codecs {
		names = append(names, n)
	}
	sort.Strings(names[1:])
	return names
}

// ByExt returns the codec whose extension ends name ("db.dump.zst": zstd).
func ByExt(name string) (*Codec, bool) {
	for _, c := range codecs {
		if strings.HasSuffix(name, c.Ext) {
			return c, true
		}
	}
	return nil, false
}

// Bound is the largest output compressing n bytes can give with any codec
// here, framing included.
func Bound(n int) int { return n + n/255 + 1024 }

// MaxStored bounds what compressing a stream of n bytes in frames of
// frame bytes (at least 1) can give with any codec here: Bound of the
// whole, and 1 KiB more per frame.
func MaxStored(n int64, frame int) int64 {
	return int64(Bound(int(min(n, 1<<40)))) + n/int64(max(frame, 1))*1024
}

// CheckLevel reports whether level is valid for the codec.
func (c *Codec) CheckLevel(level int) error {
	if level < c.MinLevel || level > c.MaxLevel {
		return fmt.Errorf("%s levels run from %d to %d; %d is out of range", c.Name, c.MinLevel, c.MaxLevel, level)
	}
	return nil
}

// Stage returns the compress stage: workers encoders at level, shared by all
// streams of a run, each compressing frame bytes into one independent frame.
func (c *Codec) Stage(level, workers, frame int) (engine.Stage, error) {
	if err := c.CheckLevel(level); err != nil {
		return engine.Stage{}, err
	}
	if _, err := c.newEncoder(level); err != nil {
		return engine.Stage{}, err
	}
	return engine.Stage{
		Name:      stagekind.Compress.Name,
		Label:     fmt.Sprintf("%s level %d", c.Name, level),
		Proc:      encoders{c: c, level: level},
		Workers:   workers,
		ChunkSize: frame,
		Bound:     Bound,
		Memory:    c.encMemory(level, frame),
	}, nil
}

// DecompressStage returns the decompress stage. frame is the largest frame
// content expected (the backup's frame size); larger frames are decoded
// sequentially. Codecs whose frames cannot be found without decoding them
// decode sequentially with read-ahead.
func (c *Codec) DecompressStage(workers, frame int) engine.Stage {
	s := engine.Stage{
		Name:   stagekind.Decompress.Name,
		Label:  c.Name,
		Proc:   c.decoder(workers),
		Bound:  Bound,
		Memory: c.decMemory(frame),
	}
	if _, ok := s.Proc.(engine.Mapper); ok {
		s.Workers = workers
		s.ChunkSize = frame
	}
	return s
}

// Parallel reports whether the codec decompresses frames in parallel.
func (c *Codec) Parallel() bool {
	_, ok := c.decoder(1).(engine.Mapper)
	return ok
}

type encoders struct {
	c     *Codec
	level int
}

func (e encoders) NewWorker() (engine.Worker, error) { return e.c.newEncoder(e.level) }

// appendWriter appends to a slice without ever growing it past its
// capacity, so an encoder writes straight into a pooled buffer.
type appendWriter struct{ b []byte }

func (w *appendWriter) Write(p []byte) (int, error) {
	if len(w.b)+len(p) > cap(w.b) {
		return 0, fmt.Errorf("compressed output exceeds the %d-byte buffer", cap(w.b))
	}
	w.b = append(w.b, p...)
	return len(p), nil
}

// Encoder returns one encoder at level: Map compresses a unit into one
// frame (a deduplicated chunk, say).
func (c *Codec) Encoder(level int) (engine.Worker, error) {
	if err := c.CheckLevel(level); err != nil {
		return nil, err
	}
	return c.newEncoder(level)
}

// FrameDecoder returns one decoder whose Map decodes one whole frame into
// dst's capacity, or false for a codec that decodes streams only.
func (c *Codec) FrameDecoder() (engine.Worker, bool, error) {
	m, ok := c.decoder(1).(engine.Mapper)
	if !ok {
		return nil, false, nil
	}
	w, err := m.NewWorker()
	return w, true, err
}
