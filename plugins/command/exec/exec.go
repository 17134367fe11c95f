package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

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
			sdk.Attribute{Name: "name", Type: sdk.String, Description: "The stream's name (used in object keys as ${stream.name}). Default: the program's base name."}),
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
	p := newProc(ctx, s.c, nil)
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stdout = pw
	err = p.start()
	pw.Close() // the command holds the write end now
	if err != nil {
		pr.Close()
		return nil, err
	}
	return &reader{p: p, r: pr}, nil
}

type reader struct {
	p    *proc
	r    *os.File // the command's stdout
	eof  bool
	once sync.Once
	err  error
}

var _ sdk.FileReader = (*reader)(nil)

// File is the command's output pipe: across the plugin boundary pipe reads
// it directly; Done then says whether it read to the end.
func (r *reader) File() *os.File { return r.r }
func (r *reader) Done(eof bool)  { r.eof = eof }

func (r *reader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if err == io.EOF {
		r.eof = true
	}
	return n, err
}

// Close waits for the command. Closed before the end of its output, the
// command is stopped first.
func (r *reader) Close() error {
	r.once.Do(func() {
		defer r.r.Close()
		if !r.eof {
			r.p.kill()
			r.p.wait()
			return
		}
		r.err = r.p.wait()
	})
	return r.err
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
	p := newProc(ctx, s.c, []string{"PIPE_STREAM=" + obj.Stream, "PIPE_OBJECT_KEY=" + obj.Key})
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	p.cmd.Stdin = pr
	p.cmd.Stdout = p.tail // what the command prints is kept for errors
	err = p.start()
	pr.Close() // the command holds the read end now
	if err != nil {
		pw.Close()
		return nil, err
	}
	return &writer{p: p, w: pw}, nil
}

var _ sdk.FileWriter = (*writer)(nil)

// File is the command's input pipe: across the plugin boundary pipe writes
// to it directly, and closes its copy before Commit.
func (w *writer) File() *os.File { return w.w }

type writer struct {
	p    *proc
	w    *os.File // the command's stdin
	mu   sync.Mutex
	done bool // committed, aborted or failed
}

// finish marks the object done; it reports whether it already was.
func (w *writer) finish() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.done
	w.done = true
	return was
}

func (w *writer) Write(b []byte) (int, error) {
	n, err := w.w.Write(b)
	if err != nil {
		// The command stopped reading (or was aborted): its exit status
		// says why.
		w.finish()
		if werr := w.p.wait(); werr != nil {
			return n, werr
		}
		return n, fmt.Errorf("%s stopped reading its input: %w", w.p.name(), err)
	}
	return n, nil
}

func (w *writer) Commit(ctx context.Context) error {
	if w.finish() {
		return errors.New("the command already ended")
	}
	w.w.Close()
	return w.p.wait()
}

// Abort stops the command; a Write blocked on it returns.
func (w *writer) Abort(ctx context.Context) error {
	if w.finish() {
		return nil
	}
	w.p.kill()
	w.w.Close()
	w.p.wait()
	return nil
}

// proc is a running command in its own process group, so stopping it stops
// its children too.
type proc struct {
	cmd     *osexec.Cmd
	tail    *tailBuffer
	secrets []string // env values: never repeated in errors

	waited  sync.Once
	waitErr error
}

func newProc(ctx context.Context, c config, extraEnv []string) *proc {
	cmd := osexec.CommandContext(ctx, c.Command[0], c.Command[1:]...)
	cmd.Dir = c.Dir
	env := os.Environ()
	keys := make([]string, 0, len(c.Env))
	for k := range c.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+c.Env[k])
	}
	cmd.Env = append(env, extraEnv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	p := &proc{cmd: cmd, tail: &tailBuffer{max: 8 << 10}}
	for _, v := range c.Env {
		if len(v) >= 4 {
			p.secrets = append(p.secrets, v)
		}
	}
	sort.Slice(p.secrets, func(i, j int) bool { return len(p.secrets[i]) > len(p.secrets[j]) })
	cmd.Stderr = p.tail
	return p
}

func (p *proc) name() string { return filepath.Base(p.cmd.Path) }

func (p *proc) start() error {
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", p.name(), err)
	}
	return nil
}

func (p *proc) kill() {
	if p.cmd.Process != nil {
		syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// wait returns nil when the command exited zero, otherwise an error with
// its exit status and the end of what it printed. It may be called more
// than once, from more than one goroutine.
func (p *proc) wait() error {
	p.waited.Do(func() { p.waitErr = p.waitOnce() })
	return p.waitErr
}

func (p *proc) waitOnce() error {
	err := p.cmd.Wait()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(p.tail.String())
	for _, sec := range p.secrets {
		msg = strings.ReplaceAll(msg, sec, "(sensitive)")
	}
	var ee *osexec.ExitError
	if errors.As(err, &ee) {
		status := fmt.Sprintf("exited with status %d", ee.ExitCode())
		if ee.ExitCode() < 0 {
			status = "was killed (" + ee.String() + ")"
		}
		if msg == "" {
			return fmt.Errorf("%s %s", p.name(), status)
		}
		return fmt.Errorf("%s %s: %s", p.name(), status, msg)
	}
	return fmt.Errorf("%s: %w", p.name(), err)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
	cut bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
		t.cut = true
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.cut {
		return "…" + string(t.b)
	}
	return string(t.b)
}
