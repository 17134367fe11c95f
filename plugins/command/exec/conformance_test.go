package exec_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/pipebackup/pipe/plugins/command/exec"
	"github.com/pipebackup/pipe/plugins/conformance"
	"github.com/pipebackup/pipe/plugins/sdk"
)

var set = sdk.Plugin{Name: "exec", Version: "test",
	Sources: map[string]sdk.SourceType{"exec": exec.SourceType{}},
	Sinks:   map[string]sdk.SinkType{"exec": exec.SinkType{}}}

func TestMain(m *testing.M) {
	conformance.ServeIfAsked(set)
	os.Exit(m.Run())
}

func configure[T any](t *testing.T, f func(context.Context, sdk.Config) (T, sdk.Diagnostics), vals map[string]any) T {
	t.Helper()
	x, d := f(context.Background(), sdk.NewConfig(vals))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return x
}

// store is a folder the sink command writes to: a temporary name, renamed
// when the input ended, so an interrupted command commits nothing.
type store struct{ dir string }

func (s store) Key(name string) string { return name }
func (s store) Read(key string) ([]byte, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, key))
	return b, err == nil
}

const atomicCat = `cat > "$D/.tmp-$PIPE_OBJECT_KEY" && mv "$D/.tmp-$PIPE_OBJECT_KEY" "$D/$PIPE_OBJECT_KEY"`

func TestConformance(t *testing.T) {
	reg := conformance.Remote(t, set)
	rsrc, err := reg.Source("exec")
	if err != nil {
		t.Fatal(err)
	}
	rsnk, err := reg.Sink("exec")
	if err != nil {
		t.Fatal(err)
	}
	for name, ty := range map[string]struct {
		source sdk.SourceType
		sink   sdk.SinkType
	}{"in-process": {exec.SourceType{}, exec.SinkType{}}, "plugin": {rsrc, rsnk}} {
		t.Run(name+"/source", func(t *testing.T) {
			conformance.RunSource(t, conformance.Source{
				OneStream: true,
				New: func(t *testing.T, streams map[string][]byte) sdk.Source {
					if len(streams) != 1 {
						t.Fatalf("exec yields one stream, not %d", len(streams))
					}
					for n, b := range streams {
						f := filepath.Join(t.TempDir(), "data")
						os.WriteFile(f, b, 0o644)
						return configure(t, ty.source.Configure, map[string]any{"command": []string{"cat", f}, "name": n})
					}
					return nil
				},
				Endless: func(t *testing.T) (sdk.Source, string) {
					return configure(t, ty.source.Configure, map[string]any{"command": []string{"yes"}, "name": "yes"}), "yes"
				},
				Failing: func(t *testing.T, secret string) (sdk.Source, string) {
					return configure(t, ty.source.Configure, map[string]any{
						"command": []string{"sh", "-c", `echo "authentication failed for password $TOKEN" >&2; exit 1`},
						"env":     map[string]string{"TOKEN": secret}, "name": "dump"}), "dump"
				},
			})
		})
		t.Run(name+"/sink", func(t *testing.T) {
			conformance.RunSink(t, conformance.Sink{
				New: func(t *testing.T) (sdk.Sink, conformance.Store) {
					dir := t.TempDir()
					return configure(t, ty.sink.Configure, map[string]any{"command": []string{"sh", "-c", atomicCat}, "env": map[string]string{"D": dir}}), store{dir}
				},
				Slow: func(t *testing.T) sdk.Sink {
					// Takes 64 KiB every 50 ms: about 1.3 MB/s.
					slow := `while [ "$(head -c 65536 | wc -c)" -gt 0 ]; do sleep 0.05; done`
					return configure(t, ty.sink.Configure, map[string]any{"command": []string{"sh", "-c", slow}})
				},
				Failing: func(t *testing.T, secret string) sdk.Sink {
					return configure(t, ty.sink.Configure, map[string]any{
						"command": []string{"sh", "-c", `cat >/dev/null; echo "FATAL: password authentication failed: $PGPASSWORD" >&2; exit 1`},
						"env":     map[string]string{"PGPASSWORD": secret}})
				},
			})
		})
	}
}
