package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pipebackup/pipe/plugins/internal/fdsock"
	"github.com/pipebackup/pipe/plugins/internal/pb"
	"github.com/pipebackup/pipe/plugins/internal/wire"
)

// StartTimeout bounds how long a plugin may take to answer the handshake.
var StartTimeout = 10 * time.Second

// StopTimeout bounds how long a plugin may take, at the end of a run, to
// finish or abort the objects it is still writing (an aborted multipart
// upload needs the store to answer) before its process is killed. It
// matches the engine's time for aborts.
var StopTimeout = time.Minute

// callTimeout bounds the control calls that must be quick (schema,
// configure, close).
const callTimeout = 30 * time.Second

// process is one plugin process, started on first use.
type process struct {
	name   string // the plugin's name, for messages
	path   string // its executable
	cmd    func() *exec.Cmd
	sha256 string // pinned checksum, or ""

	once    sync.Once
	client  *goplugin.Client
	rpc     pb.PluginClient
	err     error
	stderr  *tailBuffer
	started *exec.Cmd
	fds     *fdsock.Conn  // nil: data travels in messages only
	fill    bool          // the plugin serves FillFile
	send    bool          // the plugin serves SendFile
	tokens  atomic.Uint64 // of the files handed to the plugin
	log     *slog.Logger
	hidden  *hiddenEnv // variables the plugin is not given; nil: none

	// died ends when the process exits without being stopped: a read of a
	// file the plugin handed over (a command's output) stops then instead
	// of waiting for whatever still holds the file open.
	died     context.Context
	markDied context.CancelFunc
	stopping atomic.Bool
}

func newProcess(name, path string, cmd func() *exec.Cmd, log *slog.Logger) *process {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	died, markDied := context.WithCancel(context.Background())
	return &process{name: name, path: path, cmd: cmd, stderr: &tailBuffer{max: 4 << 10}, log: log, died: died, markDied: markDied}
}

// whileAlive returns a context that also ends, with the plugin's exit as
// its cause, when the plugin process dies.
func (p *process) whileAlive(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	unwatch := context.AfterFunc(p.died, func() {
		cancel(fmt.Errorf("plugin %s exited unexpectedly%s%s", p.name, exitStatus(p.started), p.said()))
	})
	return ctx, func() { unwatch(); cancel(nil) }
}

// watchExit marks the process dead when it exits on its own.
func (p *process) watchExit() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for range t.C {
		if p.stopping.Load() {
			return
		}
		if p.client.Exited() {
			if !p.stopping.Load() {
				p.markDied()
			}
			return
		}
	}
}

// conn starts the process if needed and returns its client.
func (p *process) conn() (pb.PluginClient, error) {
	p.once.Do(func() { p.rpc, p.err = p.start() })
	return p.rpc, p.err
}

func (p *process) start() (pb.PluginClient, error) {
	cmd := p.cmd()
	// Its own session (and so process group): a terminal's Ctrl-C reaches
	// pipe only, which then aborts what is in flight through the plugin
	// and stops it, and everything the plugin starts can be told by its
	// session when the plugin dies (the programs' reaper ends them). The
	// kernel kills the plugin if pipe dies (the plugin also watches).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
	p.started = cmd
	// A deliberate environment: pipe's, less its own variables and those
	// the pipeline file read (see hiddenEnv), plus what the command sets.
	cmd.Env = append(p.hidden.filter(os.Environ()), cmd.Env...)
	cmd.Env = append(cmd.Env, wire.LogLevelEnv+"="+lowestLevel(p.log))
	// The descriptor socket: files the plugin's streams and objects are
	// made of are handed over on it, and pipe does their I/O itself.
	if fds, child, err := fdsock.Pair(); err == nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, child)
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", wire.FDEnv, 2+len(cmd.ExtraFiles)))
		p.fds = fds
		defer child.Close() // the plugin has its own copy once started
	}
	cfg := &goplugin.ClientConfig{
		HandshakeConfig:  wire.Handshake,
		VersionedPlugins: wire.Plugins(nil),
		Cmd:              cmd,
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:     StartTimeout,
		Stderr:           p.stderr, // before the handshake
		SyncStderr:       p.stderr, // after it: go-plugin streams the plugin's stderr
		SyncStdout:       p.stderr,
		Logger:           newPluginLog(p.log, p.name),
		SkipHostEnv:      true, // cmd.Env is the whole environment (above)
		GRPCDialOptions:  wire.DialOptions(),
	}
	if p.sha256 != "" {
		sum, err := hex.DecodeString(p.sha256)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: sha256 %q is not hex", p.name, p.sha256)
		}
		cfg.SecureConfig = &goplugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	p.client = goplugin.NewClient(cfg)
	cp, err := p.client.Client()
	if err != nil {
		p.client.Kill()
		if p.fds != nil {
			p.fds.Close()
		}
		return nil, p.startError(err)
	}
	raw, err := cp.Dispense(wire.PluginName)
	if err != nil {
		p.client.Kill()
		return nil, p.startError(err)
	}
	go p.watchExit()
	return raw.(pb.PluginClient), nil
}

// startError says why the plugin did not start, in words a user can act on.
func (p *process) startError(err error) error {
	msg := err.Error()
	lower := strings.ToLower(msg)
	var what string
	switch {
	case errors.Is(err, goplugin.ErrChecksumsDoNotMatch):
		got := fileSHA256(p.path)
		what = fmt.Sprintf("refusing to start it: %s has sha256 %s, but the pipeline pins %s; check where the binary came from, then update the pin", p.path, got, p.sha256)
	case strings.Contains(lower, "incompatible api version"):
		what = fmt.Sprintf("it speaks another protocol version than this pipe (protocol %d): %s; use a plugin built for protocol %d, or upgrade pipe", wire.ProtocolVersion, firstLine(msg), wire.ProtocolVersion)
	case strings.Contains(msg, "exited before we could connect"),
		strings.Contains(msg, "Unrecognized remote plugin message: \n") && p.exited(),
		strings.HasSuffix(firstLine(msg), "Unrecognized remote plugin message: ") && p.exited():
		what = "it exited at start" + exitStatus(p.started)
	case strings.Contains(msg, "Unrecognized remote plugin message"):
		what = "it printed something other than the plugin handshake on its standard output (is it a pipe plugin? plugins must not write to stdout): " + firstLine(msg)
	case strings.Contains(msg, "timeout while waiting for plugin to start"):
		what = fmt.Sprintf("it did not answer within %s", StartTimeout)
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist), strings.Contains(msg, "no such file"):
		what = fmt.Sprintf("%s does not exist or cannot be run", p.path)
	default:
		what = msg
	}
	return fmt.Errorf("plugin %s (%s) failed to start: %s%s", p.name, p.path, what, p.said())
}

// said returns the end of what the plugin wrote to stderr, for errors. The
// last lines of a plugin that just died may still be on their way: it
// waits until stderr has been quiet for a moment.
func (p *process) said() string {
	last := -1
	for i := 0; i < 30; i++ {
		n := len(p.stderr.String())
		if n == last {
			break
		}
		last = n
		time.Sleep(20 * time.Millisecond)
	}
	s := strings.TrimSpace(p.stderr.String())
	if s == "" {
		return ""
	}
	return "; it printed: " + s
}

// wrap explains an error from a call: a plugin that died says so.
func (p *process) wrap(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	if st, ok := status.FromError(err); ok && (st.Code() == codes.Unavailable || (st.Code() == codes.Canceled && ctx.Err() == nil)) {
		if p.exited() {
			return fmt.Errorf("plugin %s exited unexpectedly%s%s", p.name, exitStatus(p.started), p.said())
		}
		return fmt.Errorf("plugin %s: connection lost: %s%s", p.name, st.Message(), p.said())
	}
	return wire.FromStatus(ctx, err)
}

func (p *process) exited() bool {
	if p.client == nil {
		return false
	}
	for i := 0; i < 20 && !p.client.Exited(); i++ {
		time.Sleep(10 * time.Millisecond) // the exit may be a moment behind the broken connection
	}
	return p.client.Exited()
}

// stop asks the plugin to release everything, then ends it.
func (p *process) stop() {
	if p.client == nil || p.rpc == nil {
		return
	}
	p.stopping.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	_, _ = p.rpc.Stop(ctx, &pb.Stop_Request{}) // Kill follows
	cancel()
	p.client.Kill()
	if p.fds != nil {
		p.fds.Close()
	}
}

func exitStatus(cmd *exec.Cmd) string {
	if cmd == nil || cmd.ProcessState == nil {
		return ""
	}
	return " (" + cmd.ProcessState.String() + ")"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func fileSHA256(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "(unreadable)"
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "(unreadable)"
	}
	return hex.EncodeToString(h.Sum(nil))
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
