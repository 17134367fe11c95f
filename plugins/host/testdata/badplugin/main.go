// Command badplugin is a plugin that misbehaves according to its name, for
// the host's failure tests: pipe-plugin-good works, -crash dies
// mid-stream, -hang never answers the handshake, -exit exits at start,
// -garbage prints to stdout, -future speaks protocol 2, -slow has a sink
// that accepts bytes slowly.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/pipebackup/pipe/plugins/internal/wire"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/plugin"
)

func main() {
	role := strings.TrimPrefix(filepath.Base(os.Args[0]), "pipe-plugin-")
	switch role {
	case "hang":
		select {}
	case "exit":
		fmt.Fprintln(os.Stderr, "fatal: missing configuration file /etc/bad.conf")
		os.Exit(3)
	case "garbage":
		fmt.Println("Welcome to badplugin 1.0!")
		select {}
	case "future":
		hs := wire.Handshake
		hs.ProtocolVersion = 2
		goplugin.Serve(&goplugin.ServeConfig{HandshakeConfig: hs, VersionedPlugins: map[int]goplugin.PluginSet{2: {wire.PluginName: &wire.GRPCPlugin{}}}, GRPCServer: goplugin.DefaultGRPCServer})
		return
	}
	plugin.Serve(sdk.Plugin{
		Name: role, Version: "9.9.9",
		Sources: map[string]sdk.SourceType{role: sourceType{role}},
		Sinks:   map[string]sdk.SinkType{role: sinkType{role}},
	})
}

type sourceType struct{ role string }

func (s sourceType) Schema() sdk.Schema {
	return sdk.Schema{Attributes: []sdk.Attribute{{Name: "size", Type: sdk.Size, Default: int64(3 << 20)}, {Name: "token", Type: sdk.String, Secret: true}}}
}

func (s sourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	n, _ := cfg.Get("size")
	tok, _ := cfg.Get("token")
	if tok == "reject" {
		return nil, sdk.AttrError("token", "token refused", "the server said no")
	}
	t, _ := tok.(string)
	return &source{role: s.role, size: n.(int64), token: t}, nil
}

type source struct {
	role  string
	size  int64
	token string
}

func (s *source) Streams(context.Context) ([]sdk.StreamInfo, error) {
	return []sdk.StreamInfo{{Name: "data", Size: s.size}}, nil
}

func (s *source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if name == "broken" {
		// Breaks off a third of the way, as a download whose retries ran
		// out does.
		return io.NopCloser(io.MultiReader(io.LimitReader(pattern{}, s.size/3), failing{})), nil
	}
	if name == "ranges" {
		return &ranges{size: s.size, crash: s.role == "crash"}, nil
	}
	if name != "data" {
		return nil, fmt.Errorf("%q: %w", name, sdk.ErrNotFound)
	}
	if s.token != "" {
		return nil, fmt.Errorf("login with token %s failed", s.token)
	}
	r := io.LimitReader(pattern{}, s.size)
	if s.role == "crash" {
		return &crasher{r: r, after: s.size / 3}, nil
	}
	return io.NopCloser(r), nil
}

// ranges is a stream that can only write itself at offsets, last MiB
// first, as an object store's parallel ranges land out of order: byte o is
// o % 251. Read fails, so the stream cannot go through ReadStream.
type ranges struct {
	size  int64
	crash bool
}

func (r *ranges) Read([]byte) (int, error) {
	return 0, errors.New("ranges are only written at offsets")
}
func (r *ranges) Close() error { return nil }

func (r *ranges) WriteAtTo(w io.WriterAt) (int64, error) {
	const piece = 1 << 20
	var n int64
	for off := (r.size - 1) / piece * piece; off >= 0; off -= piece {
		if r.crash && n > 0 {
			panic("boom: index out of range")
		}
		b := make([]byte, min(piece, r.size-off))
		for i := range b {
			b[i] = byte((off + int64(i)) % 251)
		}
		k, err := w.WriteAt(b, off)
		n += int64(k)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

type pattern struct{}

func (pattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i % 251)
	}
	return len(p), nil
}

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("the connection broke off") }

type crasher struct {
	r     io.Reader
	after int64
	n     int64
}

func (c *crasher) Read(p []byte) (int, error) {
	if c.n >= c.after {
		panic("boom: index out of range") // the runtime writes this to fd 2 and exits 2
	}
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func (c *crasher) Close() error { return nil }

type sinkType struct{ role string }

func (s sinkType) Schema() sdk.Schema {
	return sdk.Schema{Storage: true, Attributes: []sdk.Attribute{{Name: "dir", Type: sdk.String, Required: true}}}
}

func (s sinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	d, _ := cfg.Get("dir")
	return &sink{role: s.role, dir: d.(string)}, nil
}

type sink struct {
	role string
	dir  string
}

func (s *sink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	w := &writer{s: s, key: obj.Key, ctx: ctx}
	if strings.HasPrefix(obj.Key, "at-") {
		return &atWriter{w}, nil
	}
	return w, nil
}

// atWriter is the writer of a key starting "at-": it can also take the
// object from a file at once (sdk.ReaderAtFrom), reading it from its end
// backwards, as parts in parallel may.
type atWriter struct{ *writer }

func (w *atWriter) ReadAtFrom(r io.ReaderAt, size int64, progress func(int64)) (int64, error) {
	b := make([]byte, size)
	const piece = 1 << 20
	for off := (size - 1) / piece * piece; off >= 0; off -= piece {
		n, err := r.ReadAt(b[off:min(off+piece, size)], off)
		if err != nil && !(err == io.EOF && off+int64(n) == size) {
			return 0, err
		}
		progress(int64(n))
	}
	w.buf.Write(b)
	return size, nil
}

type writer struct {
	s   *sink
	key string
	ctx context.Context
	buf bytes.Buffer
}

func (w *writer) Write(p []byte) (int, error) {
	if w.s.role == "slow" {
		select {
		case <-time.After(50 * time.Millisecond):
		case <-w.ctx.Done():
			return 0, w.ctx.Err()
		}
	}
	if strings.HasPrefix(w.key, "stuck-") && w.buf.Len() >= 1<<20 {
		<-w.ctx.Done() // an upload that hangs until the object is given up
		return 0, w.ctx.Err()
	}
	if strings.HasPrefix(w.key, "refuse-") && w.buf.Len() >= 3<<20 {
		return 0, errors.New("the store refused the part")
	}
	return w.buf.Write(p)
}

// Commit stores the object; a key starting "lost-" is stored and then
// reported as failed, as when a store's answer gets lost. (Write refuses
// more than 3 MiB to a key starting "refuse-", and hangs after 1 MiB to
// one starting "stuck-".)
func (w *writer) Commit(context.Context) error {
	if err := os.WriteFile(filepath.Join(w.s.dir, w.key), w.buf.Bytes(), 0o600); err != nil {
		return err
	}
	if strings.HasPrefix(w.key, "lost-") {
		return errors.New("the answer to the commit got lost")
	}
	return nil
}

// Abort removes what a failed Commit left.
func (w *writer) Abort(context.Context) error {
	err := os.Remove(filepath.Join(w.s.dir, w.key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
