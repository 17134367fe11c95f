package fs_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pipebackup/pipe/plugins/conformance"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/fs"
)

var set = sdk.Plugin{Name: "fs", Version: "test",
	Sources: map[string]sdk.SourceType{"fs": fs.SourceType{}},
	Sinks:   map[string]sdk.SinkType{"fs": fs.SinkType{}}}

func TestMain(m *testing.M) {
	conformance.ServeIfAsked(set)
	os.Exit(m.Run())
}

type types struct {
	source sdk.SourceType
	sink   sdk.SinkType
}

func boundaries(t *testing.T) map[string]types {
	reg := conformance.Remote(t, set)
	src, err := reg.Source("fs")
	if err != nil {
		t.Fatal(err)
	}
	snk, err := reg.Sink("fs")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]types{
		"in-process": {fs.SourceType{}, fs.SinkType{}},
		"plugin":     {src, snk},
	}
}

func configure[T any](t *testing.T, f func(context.Context, sdk.Config) (T, sdk.Diagnostics), vals map[string]any) T {
	t.Helper()
	x, d := f(context.Background(), sdk.NewConfig(vals))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return x
}

type store struct{ dir string }

func (s store) Key(name string) string { return filepath.Join(s.dir, name) }
func (s store) Read(key string) ([]byte, bool) {
	b, err := os.ReadFile(key)
	return b, err == nil
}

func TestConformance(t *testing.T) {
	for name, ty := range boundaries(t) {
		t.Run(name+"/source", func(t *testing.T) {
			conformance.RunSource(t, conformance.Source{
				New: func(t *testing.T, streams map[string][]byte) sdk.Source {
					dir := t.TempDir()
					for n, b := range streams {
						p := filepath.Join(dir, n)
						os.MkdirAll(filepath.Dir(p), 0o755)
						if err := os.WriteFile(p, b, 0o644); err != nil {
							t.Fatal(err)
						}
					}
					return configure(t, ty.source.Configure, map[string]any{"path": dir, "tar": false})
				},
				Endless: func(t *testing.T) (sdk.Source, string) {
					// A FIFO fed forever: a file that never ends.
					dir := t.TempDir()
					fifo := filepath.Join(dir, "endless")
					if err := syscall.Mkfifo(fifo, 0o600); err != nil {
						t.Fatal(err)
					}
					go func() {
						f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
						if err != nil {
							return
						}
						defer f.Close()
						buf := make([]byte, 64<<10)
						for {
							if _, err := f.Write(buf); err != nil {
								return
							}
						}
					}()
					return configure(t, ty.source.Configure, map[string]any{"path": fifo, "tar": false}), "endless"
				},
			})
		})
		t.Run(name+"/sink", func(t *testing.T) {
			conformance.RunSink(t, conformance.Sink{
				New: func(t *testing.T) (sdk.Sink, conformance.Store) {
					return configure(t, ty.sink.Configure, map[string]any{"untar": false}), store{t.TempDir()}
				},
				Exclusive: true,
			})
		})
	}
}
