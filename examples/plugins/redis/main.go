// Command pipe-plugin-redis is an example third-party pipe plugin: a source
// that streams a Redis server's snapshot (an RDB file) with
// `redis-cli --rdb -`, so a pipeline can compress, encrypt and store it
// like any other stream.
//
//	go build -o .pipe/plugins/pipe-plugin-redis ./examples/plugins/redis
//
// It is a complete plugin: a schema (with the password marked secret, so
// pipe never prints it), a configuration check, the source, and a main that
// registers it and calls plugin.Serve. It uses only the plugin SDK.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/plugin"
)

func main() {
	plugin.Serve(sdk.Plugin{
		Name:    "redis",
		Version: "0.1.0",
		Sources: map[string]sdk.SourceType{"redis": sourceType{}},
	})
}

type sourceType struct{}

func (sourceType) Schema() sdk.Schema {
	return sdk.Schema{
		Description: "Streams a snapshot of a Redis server (an RDB file, as `redis-cli --rdb -` writes it) as one stream.",
		Attributes: []sdk.Attribute{
			{Name: "addr", Type: sdk.String, Default: "127.0.0.1:6379", Description: "host:port of the Redis server."},
			{Name: "password", Type: sdk.String, Secret: true, Description: "The server's password (AUTH); passed to redis-cli in its environment, never on its command line."},
			{Name: "name", Type: sdk.String, Default: "dump.rdb", Description: "The stream's name."},
			{Name: "redis_cli", Type: sdk.String, Default: "redis-cli", Description: "The redis-cli program (7.0 or newer)."},
		},
	}
}

type config struct {
	Addr     string `pipe:"addr"`
	Password string `pipe:"password"`
	Name     string `pipe:"name"`
	CLI      string `pipe:"redis_cli"`
}

func (sourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	var c config
	if err := cfg.Decode(&c); err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	var diags sdk.Diagnostics
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		diags = append(diags, sdk.AttrError("addr", "invalid address", fmt.Sprintf("%q: write host:port, e.g. \"127.0.0.1:6379\"", c.Addr))...)
	}
	if _, err := exec.LookPath(c.CLI); err != nil {
		diags = append(diags, sdk.AttrError("redis_cli", fmt.Sprintf("cannot run %q", c.CLI), "install redis-tools (redis-cli 7.0 or newer) or give its path")...)
	}
	if diags.HasErrors() {
		return nil, diags
	}
	return &source{c: c}, nil
}

type source struct{ c config }

func (s *source) Streams(context.Context) ([]sdk.StreamInfo, error) {
	return []sdk.StreamInfo{{Name: s.c.Name, Size: -1}}, nil
}

// Open starts redis-cli; the stream is its standard output. Cancelling ctx
// (the run failed, or pipe was interrupted) kills it.
func (s *source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if name != s.c.Name {
		return nil, fmt.Errorf("stream %q: %w", name, sdk.ErrNotFound)
	}
	host, port, _ := net.SplitHostPort(s.c.Addr)
	cmd := exec.CommandContext(ctx, s.c.CLI, "-h", host, "-p", port, "--no-auth-warning", "--rdb", "-")
	cmd.Env = os.Environ()
	if s.c.Password != "" {
		cmd.Env = append(cmd.Env, "REDISCLI_AUTH="+s.c.Password)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &snapshot{cmd: cmd, out: out, stderr: &stderr}, nil
}

type snapshot struct {
	cmd    *exec.Cmd
	out    io.Reader
	stderr *strings.Builder
	eof    bool
}

func (s *snapshot) Read(p []byte) (int, error) {
	n, err := s.out.Read(p)
	if errors.Is(err, io.EOF) {
		s.eof = true
	}
	return n, err
}

// Close waits for redis-cli: a snapshot is good only if it exited zero.
func (s *snapshot) Close() error {
	if !s.eof {
		_ = s.cmd.Process.Kill()
	}
	if err := s.cmd.Wait(); err != nil && s.eof {
		return fmt.Errorf("redis-cli failed (%v): %s", err, lastLine(s.stderr.String()))
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}
