package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	dir       string
	readOnly  bool // its files refuse writes
	writeOnly bool // its files refuse reads
}

func (s fileSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	f, err := os.CreateTemp(s.dir, ".tmp-*")
	if err != nil {
		return nil, err
	}
	if s.writeOnly {
		f.Close()
		if f, err = os.OpenFile(f.Name(), os.O_WRONLY, 0); err != nil {
			return nil, err
		}
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

// fileSource serves one regular file as an sdk.FileReader, as the fs
// source does.
type fileSource struct {
	path string
	skip int64        // the stream starts this far into the file (a header read already)
	done atomic.Int32 // 1: Done(true), 2: Done(false)
}

func (s *fileSource) Streams(context.Context) ([]sdk.StreamInfo, error) {
	fi, err := os.Stat(s.path)
	if err != nil {
		return nil, err
	}
	return []sdk.StreamInfo{{Name: "obj", Size: fi.Size()}}, nil
}

func (s *fileSource) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	f, err := os.Open(s.path)
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(s.skip, io.SeekStart); err != nil {
		return nil, err
	}
	return &osFileReader{f: f, s: s}, nil
}

type osFileReader struct {
	f *os.File
	s *fileSource
}

func (r *osFileReader) Read(p []byte) (int, error) { return r.f.Read(p) }
func (r *osFileReader) Close() error               { return r.f.Close() }
func (r *osFileReader) File() *os.File             { return r.f }
func (r *osFileReader) Done(eof bool) {
	if eof {
		r.s.done.Store(1)
	} else {
		r.s.done.Store(2)
	}
}

// atSink keeps objects in memory; its writers can take a file at once
// (sdk.ReaderAtFrom) and count which way they were written.
type atSink struct {
	objects   map[string][]byte
	fromFile  atomic.Int32
	writes    atomic.Int32
	failAfter int64  // ReadAtFrom fails after this many bytes, as an upload that broke off
	grow      string // ReadAtFrom appends to this file meanwhile, as a log still written
}

func (s *atSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	return &atWriter{s: s, key: obj.Key}, nil
}

type atWriter struct {
	s   *atSink
	key string
	b   []byte
}

func (w *atWriter) Write(p []byte) (int, error) {
	w.s.writes.Store(1)
	w.b = append(w.b, p...)
	return len(p), nil
}

func (w *atWriter) ReadAtFrom(r io.ReaderAt, size int64, progress func(int64)) (int64, error) {
	w.s.fromFile.Store(1)
	if w.s.failAfter > 0 {
		return 0, errors.New("uploading part 2: connection reset by peer")
	}
	if w.s.grow != "" {
		f, err := os.OpenFile(w.s.grow, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return 0, err
		}
		f.Write([]byte("one more line\n"))
		f.Close()
	}
	w.b = make([]byte, size)
	n, err := r.ReadAt(w.b, 0)
	progress(int64(n))
	if err == io.EOF && int64(n) == size {
		err = nil
	}
	return int64(n), err
}

func (w *atWriter) Commit(ctx context.Context) error { w.s.objects[w.key] = w.b; return nil }
func (w *atWriter) Abort(ctx context.Context) error  { return nil }

func sendJob(src *fileSource, snk *atSink, size int64) *Job {
	return &Job{Source: src, ChunkSize: 4096, Parallel: 1, Depth: 1,
		Sinks:   []Sink{{Name: "store", Sink: snk}},
		Streams: []Stream{{Name: "obj", Size: size, Objects: []sdk.Object{{Key: "obj", Stream: "obj", Size: size}}}}}
}

// A regular file that goes unchanged into an object the sink can take from
// a file is handed to the sink (direct.SendFile); anything between them has it
// written in order. A failed send fails the run with the sink's error.
func TestSendHandsTheFile(t *testing.T) {
	data := randBytes(23, 12_345)
	path := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	src, snk := &fileSource{path: path}, &atSink{objects: map[string][]byte{}}
	res, r, err := run(t, sendJob(src, snk, int64(len(data))))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snk.objects["obj"], data) || snk.fromFile.Load() != 1 || snk.writes.Load() != 0 {
		t.Fatalf("stored %d bytes; from the file %d, by Write %d", len(snk.objects["obj"]), snk.fromFile.Load(), snk.writes.Load())
	}
	if src.done.Load() != 1 || res.Streams[0].Read != int64(len(data)) || r.sinks[0].BytesIn() != int64(len(data)) {
		t.Fatalf("done %d, read %d, sink meter %d", src.done.Load(), res.Streams[0].Read, r.sinks[0].BytesIn())
	}

	src, snk = &fileSource{path: path}, &atSink{objects: map[string][]byte{}}
	j := sendJob(src, snk, int64(len(data)))
	j.Stages = []Stage{{Name: "rot", Proc: rot{by: 0}}}
	if _, _, err := run(t, j); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snk.objects["obj"], data) || snk.fromFile.Load() != 0 || snk.writes.Load() != 1 {
		t.Fatalf("with a stage: from the file %d, by Write %d", snk.fromFile.Load(), snk.writes.Load())
	}

	src, snk = &fileSource{path: path}, &atSink{objects: map[string][]byte{}, failAfter: 1}
	_, _, err = run(t, sendJob(src, snk, int64(len(data))))
	if err == nil || !strings.Contains(err.Error(), `sink store: writing "obj": uploading part 2`) {
		t.Fatalf("err = %v", err)
	}
	if _, ok := snk.objects["obj"]; ok || src.done.Load() != 2 {
		t.Fatalf("a failed send committed, or told the source it read to the end (%d)", src.done.Load())
	}

	// A file written to while it is sent is not committed cut: the
	// source's failure, named so.
	src, snk = &fileSource{path: path}, &atSink{objects: map[string][]byte{}, grow: path}
	_, _, err = run(t, sendJob(src, snk, int64(len(data))))
	if err == nil || !strings.Contains(err.Error(), "source: reading the file: the file changed while it was uploaded") {
		t.Fatalf("err = %v", err)
	}
	if _, ok := snk.objects["obj"]; ok {
		t.Fatal("a file that changed during the send was committed")
	}

	// A stream that does not start at the file's first byte goes through
	// the chunks, from where it starts.
	src, snk = &fileSource{path: path, skip: 100}, &atSink{objects: map[string][]byte{}}
	if _, _, err := run(t, sendJob(src, snk, int64(len(data)))); err != nil {
		t.Fatal(err)
	}
	grown, _ := os.ReadFile(path)
	if snk.fromFile.Load() != 0 || !bytes.Equal(snk.objects["obj"], grown[100:]) {
		t.Fatalf("a stream from byte 100: from the file %d, stored %d bytes", snk.fromFile.Load(), len(snk.objects["obj"]))
	}
}

// A stream whose only stage observes it (a checksum) still goes direct:
// written at its offsets, or handed over as a file, while a follower reads
// the file back for the stage, which sees every byte in order. A file the
// follower could not read back, or a digest that does not match, fails the
// stream named by its stage.
func TestDirectIsFollowed(t *testing.T) {
	data := randBytes(24, 3*followPiece+777) // several pieces, ranges landing last first
	sum := sha256.Sum256(data)
	want := hex.EncodeToString(sum[:])
	checksum := func(j *Job) { j.Stages = []Stage{{Name: "checksum", Proc: digest{}}} }

	src, dir := &rangedSource{data: data}, t.TempDir()
	j := fillJob(src, dir)
	checksum(j)
	res, r, err := run(t, j)
	if err != nil {
		t.Fatal(err)
	}
	if src.atOffsets.Load() != 1 || src.inOrder.Load() != 0 {
		t.Fatal("fill: the stream was read in order, not written at its offsets")
	}
	if got := res.Streams[0].Observed["checksum"]; got != want {
		t.Fatalf("fill: the stage saw %q, want %q", got, want)
	}
	if m := r.stages[0]; m.BytesIn() != int64(len(data)) {
		t.Fatalf("fill: the stage's meter counted %d bytes", m.BytesIn())
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "obj")); !bytes.Equal(got, data) {
		t.Fatalf("fill: the file has %d bytes, not the object's", len(got))
	}

	// A file open only for writing cannot be followed: through the chunks.
	src, dir = &rangedSource{data: data}, t.TempDir()
	j = fillJob(src, dir)
	j.Sinks[0].Sink = fileSink{dir: dir, writeOnly: true}
	checksum(j)
	if res, _, err = run(t, j); err != nil {
		t.Fatal(err)
	}
	if src.inOrder.Load() != 1 || res.Streams[0].Observed["checksum"] != want {
		t.Fatalf("write-only file: in order %d, the stage saw %q", src.inOrder.Load(), res.Streams[0].Observed["checksum"])
	}

	// A digest that does not match fails the fill and commits nothing.
	src, dir = &rangedSource{data: data}, t.TempDir()
	j = fillJob(src, dir)
	j.Stages = []Stage{{Name: "checksum", Proc: digest{want: map[string]string{"obj": strings.Repeat("0", 64)}}}}
	if _, _, err = run(t, j); err == nil || !strings.Contains(err.Error(), "checksum: digest mismatch") {
		t.Fatalf("fill, wrong digest: err = %v", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("fill, wrong digest: left behind %v", left)
	}

	// A file handed to the sink is read by the follower beside it.
	path := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	fsrc, snk := &fileSource{path: path}, &atSink{objects: map[string][]byte{}}
	j = sendJob(fsrc, snk, int64(len(data)))
	checksum(j)
	if res, _, err = run(t, j); err != nil {
		t.Fatal(err)
	}
	if snk.fromFile.Load() != 1 || snk.writes.Load() != 0 || !bytes.Equal(snk.objects["obj"], data) {
		t.Fatalf("send: from the file %d, by Write %d", snk.fromFile.Load(), snk.writes.Load())
	}
	if got := res.Streams[0].Observed["checksum"]; got != want || fsrc.done.Load() != 1 {
		t.Fatalf("send: the stage saw %q, want %q; done %d", got, want, fsrc.done.Load())
	}

	// A file written to while it is sent is not committed, whatever the
	// follower read of it.
	fsrc, snk = &fileSource{path: path}, &atSink{objects: map[string][]byte{}, grow: path}
	j = sendJob(fsrc, snk, int64(len(data)))
	checksum(j)
	if _, _, err = run(t, j); err == nil || !strings.Contains(err.Error(), "the file changed while it was uploaded") {
		t.Fatalf("send, file growing: err = %v", err)
	}
	if _, ok := snk.objects["obj"]; ok {
		t.Fatal("send, file growing: committed")
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}

	fsrc, snk = &fileSource{path: path}, &atSink{objects: map[string][]byte{}}
	j = sendJob(fsrc, snk, int64(len(data)))
	j.Stages = []Stage{{Name: "checksum", Proc: digest{want: map[string]string{"obj": strings.Repeat("0", 64)}}}}
	if _, _, err = run(t, j); err == nil || !strings.Contains(err.Error(), "checksum: digest mismatch") {
		t.Fatalf("send, wrong digest: err = %v", err)
	}
	if _, ok := snk.objects["obj"]; ok || fsrc.done.Load() != 2 {
		t.Fatalf("send, wrong digest: committed, or done %d", fsrc.done.Load())
	}
}
