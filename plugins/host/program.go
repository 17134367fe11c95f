package host

import (
	"bytes"
	"context"
	"io"
	"strings"
	"sync"

	"github.com/pipebackup/pipe/plugins/internal/command"
)

// Program is a program pipe runs itself, outside any plugin: a hook, a
// notification command.
type Program struct {
	// Argv is the program and its arguments.
	Argv []string
	// Label names it in errors and in the log.
	Label string
	// Env is added to the environment it gets, as KEY=VALUE.
	Env []string
	// Stdin is its standard input.
	Stdin []byte
	// Secrets are never repeated in its output or errors.
	Secrets []string
	// Output, when set, gets each line it prints (standard output and
	// error), secrets scrubbed.
	Output func(line string)
	// Stdout, when set, gets its standard output instead, as it is.
	Stdout io.Writer
}

// RunProgram runs p as plugins run their programs: in its own process
// group, killed with everything it started when ctx ends, when it exits
// or when pipe dies, given the environment a plugin process gets (without
// pipe's variables and those the pipeline file read with env()). An error
// holds its exit status and the end of what it printed.
func (r *Registry) RunProgram(ctx context.Context, p Program) error {
	c := command.New(ctx, command.Spec{Argv: p.Argv, Label: p.Label, Env: p.Env, Secrets: p.Secrets,
		Base: r.hidden.filter(command.Environ())})
	cmd := c.Cmd()
	cmd.Stdin = bytes.NewReader(p.Stdin)
	var lines *lineWriter
	if p.Stdout != nil {
		cmd.Stdout = p.Stdout
	} else if p.Output != nil {
		lines = &lineWriter{emit: func(l string) { p.Output(c.Scrub(l)) }}
		cmd.Stdout = lines
		cmd.Stderr = io.MultiWriter(c.Tail(), lines)
	} else {
		cmd.Stdout = io.Discard
	}
	err := c.Run()
	if lines != nil {
		lines.flush()
	}
	return err
}

// lineWriter hands on each whole line written to it.
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	emit func(string)
}

// maxLine is the longest line handed on whole; a longer one is cut.
const maxLine = 4 << 10

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(cut(string(w.buf[:i])))
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > maxLine {
		w.emit(cut(string(w.buf)))
		w.buf = w.buf[:0]
	}
	return len(b), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) > 0 {
		w.emit(cut(string(w.buf)))
		w.buf = nil
	}
}

func cut(s string) string {
	s = strings.TrimRight(s, "\r")
	if len(s) > maxLine {
		return s[:maxLine] + "…"
	}
	return s
}
