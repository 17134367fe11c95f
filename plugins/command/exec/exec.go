package exec

import (
	"context"
	"fmt"
	"io"
	osexec "os/exec"
	"path/filepath"
	"sort"

	"github.com/pipebackup/pipe/plugins/internal/command"
	"github.com/pipebackup/pipe/plugins/sdk"
)

func commonAttributes() []sdk.Attribute {
	return []sdk.Attribute{
		{Name: "command", Type: sdk.StringList, Required: true, Description: `The program and its arguments, e.g. ["pg_dump", "--format=custom", "mydb"]. No shell is involved; use ["sh", "-c", "…"] for one.`},
		{Name: "env", Type: sdk.StringMap, Secret: true, Description: "Extra environment variables for the command (passwords go here, never in command). Secret: never printed."},
		{Name: "dir", Type: sdk.String, Description: "Working directory of the command."},
	}
}

type config struct {
	Command []string          `pipe:"command"`
	Env     map[string]string `pipe:"env"`
	Dir     string            `pipe:"dir"`
	Name    string            `pipe:"name"`
}

func configure(cfg sdk.Config) (config, sdk.Diagnostics) {
	var c config
	if err := cfg.Decode(&c); err != nil {
		return c, sdk.AttrError("", "invalid configuration", err.Error())
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		return c, sdk.AttrError("command", "empty command", `give the program and its arguments, e.g. ["pg_dump", "mydb"]`)
	}
	if _, err := osexec.LookPath(c.Command[0]); err != nil {
		return c, sdk.AttrError("command", fmt.Sprintf("cannot run %q", c.Command[0]), "it is not an executable file and not found in PATH; install it or give its full path")
	}
	return c, nil
}

// SourceType is the "exec" source.
type SourceType struct{}

var _ sdk.SourceType = SourceType{}

func (SourceType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Runs a command and reads its standard output as one stream. The stream fails if the command exits non-zero.",
		Attributes: append(commonAttributes(),
			sdk.Attribute{Name: "name", Type: sdk.String, StreamName: true, Description: "The stream's name (used in object keys as ${stream.name}). Default: the program's base name."}),
	}
}

func (SourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	c, diags := configure(cfg)
	if diags.HasErrors() {
		return nil, diags
	}
	if c.Name == "" {
		c.Name = filepath.Base(c.Command[0])
	}
	return &Source{c: c}, nil
}

// Source runs a command per Open.
type Source struct{ c config }

func (s *Source) Streams(context.Context) ([]sdk.StreamInfo, error) {
	return []sdk.StreamInfo{{Name: s.c.Name, Size: -1}}, nil
}

func (s *Source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if name != s.c.Name {
		return nil, fmt.Errorf("stream %q: %w (this command yields %q)", name, sdk.ErrNotFound, s.c.Name)
	}
	return command.Read(ctx, s.c.spec(nil))
}

// SinkType is the "exec" sink.
type SinkType struct{}

var _ sdk.SinkType = SinkType{}

func (SinkType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Runs the command once per stream with the stream on its standard input (environment: PIPE_STREAM, PIPE_OBJECT_KEY). The stream commits when the command exits zero.",
		Attributes:  commonAttributes(),
	}
}

func (SinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	c, diags := configure(cfg)
	if diags.HasErrors() {
		return nil, diags
	}
	return &Sink{c: c}, nil
}

// Sink feeds a command per stream.
type Sink struct{ c config }

func (s *Sink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	return command.Write(ctx, s.c.spec([]string{"PIPE_STREAM=" + obj.Stream, "PIPE_OBJECT_KEY=" + obj.Key}))
}

// spec is the command with its env (sorted, so runs are repeatable) and
// extra variables.
func (c config) spec(extra []string) command.Spec {
	s := command.Spec{Argv: c.Command, Dir: c.Dir}
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		s.Env = append(s.Env, k+"="+c.Env[k])
		s.Secrets = append(s.Secrets, c.Env[k])
	}
	s.Env = append(s.Env, extra...)
	return s
}
