// Package command runs the programs endpoints are built on (a shell
// command, pg_dump, mariadb-dump, psql, …): each in its own process group,
// killed with its process group when its context ends, when it exits (what
// it left running goes too), or when the process that started it dies
// however it dies (a reaper process watches, see reaper.go), its
// stderr's tail kept for errors with secrets scrubbed, and its standard
// output or input offered as an sdk stream or object that the plugin
// boundary can hand over as a file descriptor.
//
// It imports the plugin SDK only.
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/ospipe"
)

// Spec is a program to run.
type Spec struct {
	// Argv is the program and its arguments. It must hold no secret: a
	// command line is visible to every user of the machine.
	Argv []string
	// Dir is the working directory; empty means pipe's.
	Dir string
	// Env is added to the environment the program gets, as KEY=VALUE:
	// Base, or else the plugin process's less the variables of pipe and
	// of the plugin protocol (see Environ).
	Env []string
	// Base, when set, is the environment the program starts from instead
	// of Environ's (pipe's own programs: what plugin processes get).
	Base []string
	// Secrets are values never repeated in errors (passwords passed in Env).
	Secrets []string
	// Label names the program in errors; default: Argv[0]'s base name.
	Label string
	// Cleanup runs once the program has ended, or failed to start: it
	// removes what the program needed only while it ran (an option file
	// with a password, say).
	Cleanup func()
	// Explain, when set, gets the message of a program that failed (the
	// end of what it printed, secrets scrubbed) and returns what to do
	// about it where the message alone does not say, added to the error;
	// "" adds nothing.
	Explain func(msg string) string
}

// Environ is the environment a program starts from: this process's, less
// pipe's own variables (PIPE_*) and go-plugin's (PLUGIN_*), which belong to
// the plugin process and not to the programs it runs.
func Environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "PIPE_") || strings.HasPrefix(name, "PLUGIN_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// Cmd is a running program.
type Cmd struct {
	cmd     *osexec.Cmd
	tail    *tailBuffer
	secrets []string
	label   string
	cleanup func()
	explain func(string) string

	waited  sync.Once
	waitErr error
	started time.Time
}

// New prepares s; Start runs it. ctx ending kills the process group.
func New(ctx context.Context, s Spec) *Cmd {
	cmd := osexec.CommandContext(ctx, s.Argv[0], s.Argv[1:]...)
	cmd.Dir = s.Dir
	base := s.Base
	if base == nil {
		base = Environ()
	}
	cmd.Env = append(slices.Clip(base), s.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	c := &Cmd{cmd: cmd, tail: &tailBuffer{max: 8 << 10}, label: s.Label, cleanup: s.Cleanup, explain: s.Explain}
	if c.label == "" {
		c.label = filepath.Base(s.Argv[0])
	}
	for _, v := range s.Secrets {
		if len(v) >= 4 {
			c.secrets = append(c.secrets, v)
		}
	}
	sort.Slice(c.secrets, func(i, j int) bool { return len(c.secrets[i]) > len(c.secrets[j]) })
	cmd.Stderr = c.tail
	return c
}

// Cmd is the underlying command, to connect its input and output before
// Start.
func (c *Cmd) Cmd() *osexec.Cmd { return c.cmd }

// Tail is where the program's stderr goes; connect stdout to it to keep
// what it prints for errors too.
func (c *Cmd) Tail() io.Writer { return c.tail }

// Name is the program's label, for messages.
func (c *Cmd) Name() string { return c.label }

// Start runs the program.
func (c *Cmd) Start() error {
	startReaper() // before the program runs: nothing it starts escapes
	if err := c.cmd.Start(); err != nil {
		if c.cleanup != nil {
			c.cleanup()
		}
		return fmt.Errorf("starting %s: %w", c.label, err)
	}
	c.started = time.Now()
	watch(c.cmd.Process.Pid, true)
	// The program's name only: its arguments may hold what must not print.
	sdk.Log().Info("program started", "program", c.label, "pid", c.cmd.Process.Pid)
	return nil
}

// Kill stops the program and its children.
func (c *Cmd) Kill() {
	if c.cmd.Process != nil {
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	}
}

// Run starts the program and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Wait returns nil when the program exited zero, otherwise an error with
// its exit status and the end of what it printed, secrets scrubbed. It may
// be called more than once, from more than one goroutine.
func (c *Cmd) Wait() error {
	c.waited.Do(func() { c.waitErr = c.waitOnce() })
	return c.waitErr
}

// Scrub replaces every secret in s.
func (c *Cmd) Scrub(s string) string { return sdk.Scrub(s, c.secrets...) }

func (c *Cmd) waitOnce() error {
	// Once the program exits (waited for without reaping it, so its group
	// id stays taken), what it started ends with it: a background child
	// would outlive the run and hold its output open. Then the reaper can
	// forget the group.
	pid := c.cmd.Process.Pid
	var info unix.Siginfo
	for {
		if err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); err != syscall.EINTR {
			break
		}
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL) // ESRCH: nothing was left
	watch(pid, false)
	err := c.cmd.Wait()
	if c.cleanup != nil {
		c.cleanup()
	}
	sdk.Log().Debug("program ended", "program", c.label, "status", c.cmd.ProcessState.ExitCode(), "seconds", time.Since(c.started).Seconds())
	if err == nil {
		return nil
	}
	msg := c.Scrub(strings.TrimSpace(c.tail.String()))
	if c.explain != nil && msg != "" {
		if why := c.explain(msg); why != "" {
			msg += "; " + why
		}
	}
	var ee *osexec.ExitError
	if errors.As(err, &ee) {
		status := fmt.Sprintf("exited with status %d", ee.ExitCode())
		if ee.ExitCode() < 0 {
			status = "was killed (" + ee.String() + ")"
		}
		if msg == "" {
			return fmt.Errorf("%s %s", c.label, status)
		}
		return fmt.Errorf("%s %s: %s", c.label, status, msg)
	}
	return fmt.Errorf("%s: %w", c.label, err)
}

// Output runs s with stdin as its input and returns what it printed on
// stdout; an error carries its exit status and stderr, as Wait's do.
func Output(ctx context.Context, s Spec, stdin string) (string, error) {
	c := New(ctx, s)
	var out strings.Builder
	c.cmd.Stdin = strings.NewReader(stdin)
	c.cmd.Stdout = &out
	err := c.Run()
	return out.String(), err
}

// Read starts s with its standard output as the returned stream. The
// stream fails unless the program exits zero; closed before its end, it
// stops the program.
func Read(ctx context.Context, s Spec) (*Reader, error) {
	c := New(ctx, s)
	pr, pw, err := ospipe.New()
	if err != nil {
		return nil, err
	}
	c.cmd.Stdout = pw
	err = c.Start()
	pw.Close() // the program holds the write end now
	if err != nil {
		pr.Close()
		return nil, err
	}
	return &Reader{c: c, r: pr, in: ospipe.NewReader(ctx, pr)}, nil
}

// Reader is a program's standard output.
type Reader struct {
	c    *Cmd
	r    *os.File
	in   *ospipe.Reader // r, in batches
	eof  bool
	once sync.Once
	err  error
}

var _ sdk.FileReader = (*Reader)(nil)

// File is the program's output pipe: across the plugin boundary pipe reads
// it directly; Done then says whether it read to the end.
func (r *Reader) File() *os.File { return r.r }
func (r *Reader) Done(eof bool)  { r.eof = eof }

func (r *Reader) Read(b []byte) (int, error) {
	n, err := r.in.Read(b)
	if err == io.EOF {
		r.eof = true
	}
	return n, err
}

// Close waits for the program. Closed before the end of its output, the
// program is stopped first.
func (r *Reader) Close() error {
	r.once.Do(func() {
		defer r.r.Close()
		if !r.eof {
			r.c.Kill()
			_ = r.c.Wait()
			return
		}
		r.err = r.c.Wait()
	})
	return r.err
}

// Write starts s with the returned object as its standard input. The
// object commits when the program exits zero after reading all of it.
// What the program prints on stdout is kept for errors.
func Write(ctx context.Context, s Spec) (*Writer, error) {
	c := New(ctx, s)
	pr, pw, err := ospipe.New()
	if err != nil {
		return nil, err
	}
	c.cmd.Stdin = pr
	c.cmd.Stdout = c.tail
	err = c.Start()
	pr.Close() // the program holds the read end now
	if err != nil {
		pw.Close()
		return nil, err
	}
	return &Writer{c: c, w: pw, out: ospipe.NewWriter(ctx, pw)}, nil
}

// Writer is a program's standard input.
type Writer struct {
	c    *Cmd
	w    *os.File
	out  *ospipe.Writer // w, in batches
	mu   sync.Mutex
	done bool // committed, aborted or failed
}

var _ sdk.FileWriter = (*Writer)(nil)

// File is the program's input pipe: across the plugin boundary pipe writes
// to it directly, and closes its copy before Commit.
func (w *Writer) File() *os.File { return w.w }

// finish marks the object done; it reports whether it already was.
func (w *Writer) finish() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.done
	w.done = true
	return was
}

func (w *Writer) Write(b []byte) (int, error) {
	n, err := w.out.Write(b)
	if err != nil {
		// The program stopped reading (or was aborted): its exit status
		// says why.
		w.finish()
		if werr := w.c.Wait(); werr != nil {
			return n, werr
		}
		return n, fmt.Errorf("%s stopped reading its input: %w", w.c.Name(), err)
	}
	return n, nil
}

// Commit ends the input and waits for the program.
func (w *Writer) Commit(ctx context.Context) error {
	if w.finish() {
		return errors.New("the command already ended")
	}
	w.w.Close()
	return w.c.Wait()
}

// Abort stops the program; a Write blocked on it returns. When the
// program had already closed its input (it failed: a restore tool that hit
// a bad statement), Abort waits for it and returns its error: across the
// plugin boundary the host, whose write got EPIPE, learns why from Abort.
func (w *Writer) Abort(ctx context.Context) error {
	if w.finish() {
		return nil
	}
	if readerGone(w.w) {
		ended := make(chan error, 1)
		go func() { ended <- w.c.Wait() }()
		select {
		case err := <-ended:
			w.w.Close()
			return err
		case <-time.After(5 * time.Second):
		}
	}
	w.c.Kill()
	w.w.Close()
	_ = w.c.Wait()
	return nil
}

// readerGone reports whether the read end of the pipe f writes to is
// closed (poll sets POLLERR on the write end then).
func readerGone(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	gone := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, 0)
		gone = err == nil && n > 0 && fds[0].Revents&unix.POLLERR != 0
	})
	return gone
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
