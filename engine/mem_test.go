package engine

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// memSource serves streams from memory. failAt, when set, makes a stream's
// reader fail after that many bytes.
type memSource struct {
	data   map[string][]byte
	failAt map[string]int
	block  chan struct{} // when set, every Read waits for it
}

func (s *memSource) Streams(context.Context) ([]sdk.StreamInfo, error) {
	var out []sdk.StreamInfo
	for k, v := range s.data {
		out = append(out, sdk.StreamInfo{Name: k, Size: int64(len(v))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *memSource) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	b, ok := s.data[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, sdk.ErrNotFound)
	}
	var r io.Reader = bytes.NewReader(b)
	if n, ok := s.failAt[name]; ok {
		r = io.MultiReader(bytes.NewReader(b[:n]), errReader{errors.New("disk on fire")})
	}
	if s.block != nil {
		r = &blockingReader{ctx: ctx, r: r, gate: s.block}
	}
	return io.NopCloser(r), nil
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

type blockingReader struct {
	ctx  context.Context
	r    io.Reader
	gate chan struct{}
}

func (b *blockingReader) Read(p []byte) (int, error) {
	select {
	case <-b.gate:
	case <-b.ctx.Done():
		return 0, b.ctx.Err()
	}
	return b.r.Read(p)
}

// memSink keeps committed objects in memory.
type memSink struct {
	mu        sync.Mutex
	objects   map[string][]byte
	pending   map[string]bool
	aborted   int
	removed   []string
	failWrite map[string]bool // keys whose writes fail
	failAfter int             // with failWrite: bytes accepted before failing
	gate      chan struct{}   // when set, each Write waits for a token
}

func newMemSink() *memSink {
	return &memSink{objects: map[string][]byte{}, pending: map[string]bool{}, failWrite: map[string]bool{}}
}

func (s *memSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending[obj.Key] {
		return nil, fmt.Errorf("%q is already being written", obj.Key)
	}
	s.pending[obj.Key] = true
	return &memWriter{s: s, ctx: ctx, key: obj.Key}, nil
}

func (s *memSink) Remove(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, key)
	s.removed = append(s.removed, key)
	return nil
}

func (s *memSink) get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.objects[key]
	return b, ok
}

type memWriter struct {
	s    *memSink
	ctx  context.Context
	key  string
	buf  bytes.Buffer
	done bool
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.s.gate != nil {
		select {
		case <-w.s.gate:
		case <-w.ctx.Done():
			return 0, w.ctx.Err()
		}
	}
	if w.s.failWrite[w.key] && w.buf.Len()+len(p) > w.s.failAfter {
		return 0, errors.New("no space left on device")
	}
	return w.buf.Write(p)
}

func (w *memWriter) Commit(context.Context) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	delete(w.s.pending, w.key)
	w.s.objects[w.key] = append([]byte(nil), w.buf.Bytes()...)
	w.done = true
	return nil
}

func (w *memWriter) Abort(context.Context) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.done {
		return nil
	}
	delete(w.s.pending, w.key)
	w.s.aborted++
	w.done = true
	return nil
}

// framer is a Mapper that wraps each chunk in a length-prefixed frame; its
// inverse unframer is a Splitter. Together they behave like a per-chunk
// compressor and its parallel decompressor.
type framer struct{ delay func() }

func (f framer) NewWorker() (Worker, error) { return f, nil }
func (f framer) Map(dst, src []byte) ([]byte, error) {
	if f.delay != nil {
		f.delay()
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(src)))
	for _, b := range src {
		dst = append(dst, b^0x5a)
	}
	return dst, nil
}

type unframer struct{ failOn byte }

func (u unframer) NewWorker() (Worker, error) { return u, nil }
func (u unframer) Map(dst, src []byte) ([]byte, error) {
	body := src[4:]
	for _, b := range body {
		if u.failOn != 0 && b^0x5a == u.failOn {
			return nil, errors.New("bad byte")
		}
		dst = append(dst, b^0x5a)
	}
	return dst, nil
}

func (u unframer) NextUnit(r io.Reader, buf []byte) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, errors.New("truncated frame header")
		}
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(h[:]))
	buf = append(buf, h[:]...)
	if 4+n > cap(buf) {
		return buf, ErrUnitTooLarge
	}
	buf = buf[:4+n]
	if _, err := io.ReadFull(r, buf[4:]); err != nil {
		return nil, fmt.Errorf("truncated frame: %w", err)
	}
	return buf, nil
}

func (u unframer) Rest(ctx context.Context, dst io.Writer, src io.Reader) error {
	var h [4]byte
	for {
		if _, err := io.ReadFull(src, h[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(h[:]))
		buf := make([]byte, 64<<10)
		for n > 0 {
			k, err := src.Read(buf[:min(int64(len(buf)), n)])
			for i := range buf[:k] {
				buf[i] ^= 0x5a
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return werr
			}
			n -= int64(k)
			if err != nil && n > 0 {
				return fmt.Errorf("truncated frame: %w", err)
			}
		}
	}
}

// rot is a Streamer that adds one to every byte.
type rot struct{ by byte }

func (r rot) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	buf := make([]byte, 1000)
	for {
		n, err := src.Read(buf)
		for i := range buf[:n] {
			buf[i] += r.by
		}
		if _, werr := dst.Write(buf[:n]); werr != nil {
			return werr
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// digest is an Observer computing SHA-256; want, if set, is checked.
type digest struct{ want map[string]string }

func (d digest) Observe(stream string) Observation {
	return &digestObs{h: sha256.New(), want: d.want[stream]}
}

type digestObs struct {
	h    interface{ io.Writer; Sum([]byte) []byte }
	want string
}

func (o *digestObs) Write(p []byte) (int, error) { return o.h.Write(p) }
func (o *digestObs) Finish() (string, error) {
	got := hex.EncodeToString(o.h.Sum(nil))
	if o.want != "" && got != o.want {
		return got, fmt.Errorf("digest mismatch: got %s, want %s", got, o.want)
	}
	return got, nil
}
