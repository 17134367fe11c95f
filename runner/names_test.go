package runner_test

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
)

// namedSource is a third-party-like source that yields one stream under
// whatever name it was given, as a careless or hostile plugin could.
type namedSource struct{}

func (namedSource) Schema() sdk.Schema {
	return sdk.Schema{Attributes: []sdk.Attribute{{Name: "name", Type: sdk.String, Required: true}}}
}

func (namedSource) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	v, _ := cfg.Get("name")
	return oneStream(v.(string)), nil
}

type oneStream string

func (s oneStream) Streams(context.Context) ([]sdk.StreamInfo, error) {
	return []sdk.StreamInfo{{Name: string(s), Size: 4}}, nil
}

func (s oneStream) Open(context.Context, string) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("data")), nil
}

// TestStreamNamesStayInside: whatever name a source gives a stream, a sink
// never writes outside its folder; the run fails before a byte moves.
func TestStreamNamesStayInside(t *testing.T) {
	plugin := all.Builtin()
	plugin.Sources = map[string]sdk.SourceType{"named": namedSource{}}
	reg, err := host.NewRegistry(plugin)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"../../ESC", "/tmp/abs", "a/../../b", "new\nline", "nul\x00byte", "."} {
		dir := t.TempDir()
		out := filepath.Join(dir, "a", "b", "out") + "/"
		src := `pipeline "p" {
  source "named" { name = "` + strings.NewReplacer("\n", `\n`, "\x00", `\u0000`).Replace(name) + `" }
  sink "fs" { path = "` + out + `" }
}`
		f, diags := pipefile.LoadSource("t.hcl", []byte(src), pipefile.Options{RunID: "r", Schemas: reg})
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		pl, diags := plan.New(f, plan.Options{Host: profiles.Host{CPUs: 2, Memory: 8 << 30}})
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		_, err := runner.Run(context.Background(), pl.Pipelines[0], runner.Options{RunID: "r", Registry: reg})
		if err == nil || !strings.Contains(err.Error(), "yields a stream pipe cannot name") {
			t.Errorf("stream %q: err = %v, want a refusal", name, err)
		}
		var written []string
		filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				written = append(written, p)
			}
			return nil
		})
		if len(written) > 0 {
			t.Errorf("stream %q: the run wrote %v", name, written)
		}
	}
}
