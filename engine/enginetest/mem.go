// Package enginetest holds an in-memory source and sink for tests of the
// engine and of stages. It depends on the plugin SDK only.
package enginetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// MemSource serves streams from memory. failAt, when set, makes a stream's
// reader fail after that many bytes.
type MemSource struct {
	Data   map[string][]byte
	FailAt map[string]int // stream → bytes served before reads fail
	Block  chan struct{}  // when set, every Read waits for a token
}

func (s *MemSource) Streams(context.Context) ([]sdk.StreamInfo, error) {
	var out []sdk.StreamInfo
	for k, v := range s.Data {
		out = append(out, sdk.StreamInfo{Name: k, Size: int64(len(v))})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (s *MemSource) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	b, ok := s.Data[name]
	if !ok {
		return nil, fmt.Errorf("%q: %w", name, sdk.ErrNotFound)
	}
	var r io.Reader = bytes.NewReader(b)
	if n, ok := s.FailAt[name]; ok {
		r = io.MultiReader(bytes.NewReader(b[:n]), errReader{errors.New("disk on fire")})
	}
	if s.Block != nil {
		r = &blockingReader{ctx: ctx, r: r, gate: s.Block}
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

// MemSink keeps committed objects in memory.
type MemSink struct {
	mu        sync.Mutex
	Objects   map[string][]byte
	Pending   map[string]bool
	Aborted   int
	Removed   []string
	FailWrite map[string]bool // keys whose writes fail
	FailAfter int             // with FailWrite: bytes accepted before failing
	// FailCommit are keys whose Commit stores the object and then reports
	// an error, as a store whose answer got lost: Abort must remove it.
	FailCommit map[string]bool
	Gate       chan struct{} // when set, each Write waits for a token
}

func NewMemSink() *MemSink {
	return &MemSink{Objects: map[string][]byte{}, Pending: map[string]bool{}, FailWrite: map[string]bool{}, FailCommit: map[string]bool{}}
}

func (s *MemSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.Pending[obj.Key] {
		return nil, fmt.Errorf("%q is already being written", obj.Key)
	}
	s.Pending[obj.Key] = true
	return &memWriter{s: s, ctx: ctx, key: obj.Key}, nil
}

func (s *MemSink) Remove(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.Objects, key)
	s.Removed = append(s.Removed, key)
	return nil
}

// Get returns a committed object.
func (s *MemSink) Get(key string) ([]byte, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, ok := s.Objects[key]
	return b, ok
}

type memWriter struct {
	s    *MemSink
	ctx  context.Context
	key  string
	buf  bytes.Buffer
	done bool
}

func (w *memWriter) Write(p []byte) (int, error) {
	if w.s.Gate != nil {
		select {
		case <-w.s.Gate:
		case <-w.ctx.Done():
			return 0, w.ctx.Err()
		}
	}
	if w.s.FailWrite[w.key] && w.buf.Len()+len(p) > w.s.FailAfter {
		return 0, errors.New("no space left on device")
	}
	return w.buf.Write(p)
}

func (w *memWriter) Commit(context.Context) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	w.s.Objects[w.key] = append([]byte(nil), w.buf.Bytes()...)
	if w.s.FailCommit[w.key] {
		return errors.New("connection reset while completing the upload")
	}
	delete(w.s.Pending, w.key)
	w.done = true
	return nil
}

func (w *memWriter) Abort(context.Context) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.done {
		return nil
	}
	delete(w.s.Pending, w.key)
	delete(w.s.Objects, w.key)
	w.s.Aborted++
	w.done = true
	return nil
}
