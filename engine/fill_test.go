package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// rangedSource serves one object that can be read in order or written at
// its offsets (WriteAtTo, last piece first, as parallel ranges land), and
// counts which way it went.
type rangedSource struct {
	data      []byte
	failAt    int64 // WriteAtTo fails once this many bytes were written
	atOffsets atomic.Int32
	inOrder   atomic.Int32
}

func (s *rangedSource) Streams(context.Context) ([]sdk.StreamInfo, error) {
	return []sdk.StreamInfo{{Name: "obj", Size: int64(len(s.data))}}, nil
}

func (s *rangedSource) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	return &rangedStream{s: s, r: bytes.NewReader(s.data)}, nil
}

type rangedStream struct {
	s *rangedSource
	r *bytes.Reader
}

func (r *rangedStream) Read(p []byte) (int, error) {
	r.s.inOrder.Store(1)
	return r.r.Read(p)
}

func (r *rangedStream) Close() error { return nil }

func (r *rangedStream) WriteAtTo(w io.WriterAt) (int64, error) {
	r.s.atOffsets.Store(1)
	const piece = 1000
	var n int64
	for off := int64(len(r.s.data)-1) / piece * piece; off >= 0; off -= piece {
		if r.s.failAt > 0 && n >= r.s.failAt {
			return n, errors.New("the connection broke off")
		}
		k, err := w.WriteAt(r.s.data[off:min(off+piece, int64(len(r.s.data)))], off)
		n += int64(k)
		if err != nil {
			return n, fmt.Errorf("writing bytes %d-%d: %w", off, off+piece-1, err)
		}
	}
	return n, nil
}

// fileSink writes objects as files in dir through a temporary file, as the
// fs sink does: an sdk.FileWriter.
type fileSink struct {
	dir      string
	readOnly bool // its files refuse writes
}

func (s fileSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	f, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return nil, err
	}
	if s.readOnly {
		f.Close()
		if f, err = os.Open(f.Name()); err != nil {
			return nil, err
		}
	}
	return &tempFile{f: f, final: filepath.Join(s.dir, obj.Key)}, nil
}

type tempFile struct {
	f     *os.File
	final string
}

func (w *tempFile) File() *os.File                  { return w.f }
func (w *tempFile) Write(p []byte) (int, error)     { return w.f.Write(p) }
func (w *tempFile) Abort(ctx context.Context) error { w.f.Close(); return os.Remove(w.f.Name()) }
func (w *tempFile) Commit(ctx context.Context) error {
	w.f.Close()
	return os.Rename(w.f.Name(), w.final)
}

func fillJob(src *rangedSource, dir string) *Job {
	return &Job{Source: src, ChunkSize: 4096, Parallel: 1, Depth: 1,
		Sinks:   []Sink{{Name: "files", Sink: fileSink{dir: dir}}},
		Streams: []Stream{{Name: "obj", Size: int64(len(src.data)), Objects: []sdk.Object{{Key: "obj", Stream: "obj", Size: int64(len(src.data))}}}}}
}

// A stream that goes unchanged into a file is written by the source at its
// offsets; anything between them (a stage, a check, a rate limit, a second
// sink) has it read in order.
func TestFillWritesAtOffsets(t *testing.T) {
	data := randBytes(21, 10_500)
	src := &rangedSource{data: data}
	dir := t.TempDir()
	res, r, err := run(t, fillJob(src, dir))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "obj")); !bytes.Equal(got, data) {
		t.Fatalf("the file has %d bytes, not the object's", len(got))
	}
	if src.atOffsets.Load() != 1 || src.inOrder.Load() != 0 {
		t.Fatal("the stream was read in order, not written at its offsets")
	}
	if res.Streams[0].Read != int64(len(data)) || res.Streams[0].Written != int64(len(data)) || !res.Streams[0].Committed {
		t.Fatalf("result %+v", res.Streams[0])
	}
	if r.source.BytesOut() != int64(len(data)) || r.sinks[0].BytesIn() != int64(len(data)) {
		t.Fatalf("meters: source %d out, sink %d in", r.source.BytesOut(), r.sinks[0].BytesIn())
	}

	between := map[string]func(j *Job){
		"stage":      func(j *Job) { j.Stages = []Stage{{Name: "rot", Proc: rot{by: 0}}} },
		"check":      func(j *Job) { j.Streams[0].Checks = []Observation{digest{}.Observe("obj")} },
		"rate limit": func(j *Job) { j.RateLimit = 1 << 30 },
		"sink limit": func(j *Job) { j.Sinks[0].RateLimit = 1 << 30 },
	}
	for name, set := range between {
		src := &rangedSource{data: data}
		dir := t.TempDir()
		j := fillJob(src, dir)
		set(j)
		if _, _, err := run(t, j); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if src.atOffsets.Load() != 0 || src.inOrder.Load() != 1 {
			t.Fatalf("%s: the stream was written at its offsets", name)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "obj")); !bytes.Equal(got, data) {
			t.Fatalf("%s: the file has %d bytes, not the object's", name, len(got))
		}
	}
}

// A fill that fails leaves nothing behind: no file at the key, no
// temporary file.
func TestFillFailureAborts(t *testing.T) {
	src := &rangedSource{data: randBytes(22, 10_500), failAt: 3000}
	dir := t.TempDir()
	_, _, err := run(t, fillJob(src, dir))
	if err == nil || !strings.Contains(err.Error(), "source: the connection broke off") {
		t.Fatalf("err = %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}

	// A file that cannot be written is the sink's failure, named so.
	src = &rangedSource{data: randBytes(22, 10_500)}
	j := fillJob(src, dir)
	j.Sinks[0].Sink = fileSink{dir: dir, readOnly: true}
	_, _, err = run(t, j)
	if err == nil || !strings.Contains(err.Error(), `sink files: writing "obj": writing bytes`) {
		t.Fatalf("err = %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("left behind: %v", left)
	}
}
