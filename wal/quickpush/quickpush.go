// Package quickpush is pipe-wal: pipe wal push for archive_command, quick
// to start. With push { async = true } and a background pusher, most of
// the commands PostgreSQL starts, one per segment, only find their file
// archived already (the pusher's note in the spool) or wait for it; pipe,
// which links every store's SDK, spends 10-17 ms of CPU starting up for
// that, and on a server writing WAL in a burst those starts compete with
// the pusher for the same CPUs. This package links no store: it reads the
// archive's push settings from the file's text, answers for a file the
// pusher noted (or notes while it waits), and otherwise hands the command
// to pipe wal with the same arguments (exec: PostgreSQL sees one process
// and pipe's exit status). Without a background pusher (background =
// "never", or PostgreSQL as PID 1) each archive_command that starts a
// store sends the next ready files with its own and notes them: pipe-wal
// answers for those too. Everything it does not answer for itself, pipe
// does: starting the pusher, a failure the pusher noted, a file no push
// sent ahead, a synchronous push, flags other than --archive, --pgdata
// and --var, and every other pipe wal command.
package quickpush

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/wal"
)

// Main runs pipe-wal with args (without the program's name) and returns
// its exit status, unless it handed the command to pipe.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if answered(ctx, args) {
		return 0
	}
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "Error: pipe-wal: interrupted; PostgreSQL will try again")
		return 1
	}
	stop()
	err := delegate(args)
	fmt.Fprintln(os.Stderr, "Error: pipe-wal:", err)
	return 1
}

// push is a pipe wal push's arguments, when pipe-wal may answer it.
type push struct {
	file, path, archive, pgdata string
}

// parsePush returns args as a push pipe-wal may answer, or false.
func parsePush(args []string) (push, bool) {
	p := push{pgdata: "."}
	if len(args) == 0 || args[0] != "push" {
		return p, false
	}
	var pos []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		name, value, inline := strings.Cut(a, "=")
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
			continue
		case !strings.HasPrefix(a, "-") || a == "-":
			pos = append(pos, a)
			continue
		case !slices.Contains([]string{"--archive", "--pgdata", "-D", "--var"}, name):
			return p, false
		case !inline:
			if i+1 == len(args) {
				return p, false
			}
			i++
			value = args[i]
		}
		switch name {
		case "--archive":
			p.archive = value
		case "--pgdata", "-D":
			p.pgdata = value
		}
	}
	if len(pos) != 2 {
		return p, false
	}
	p.file, p.path = pos[0], pos[1]
	return p, true
}

// answered reports whether args are a push of a file the background
// pusher, or an earlier push, has archived, which pipe-wal then answers
// (exit 0).
func answered(ctx context.Context, args []string) bool {
	p, ok := parsePush(args)
	if !ok {
		return false
	}
	s, err := pipefile.ReadPushSettings(p.file, p.archive)
	if err != nil || !s.Async || !slices.Contains(wal.BackgroundModes, s.Background) {
		return false
	}
	c := &wal.Command{DataDir: p.pgdata,
		Settings: wal.CommandSettings{Async: s.Async, Background: s.Background, PushSpool: s.Spool, PushTimeout: s.Timeout}}
	return c.Answer(ctx, p.path) != nil
}

// delegate replaces this process with pipe wal and args: the pipe beside
// this program, else the one on PATH. It returns only when it could not.
func delegate(args []string) error {
	if len(args) > 0 && args[0] == "wal" {
		// What pipe-wal hands over starts with wal: this is the hand-over,
		// and the program named pipe is pipe-wal.
		return errors.New("the pipe it runs is pipe-wal itself: install pipe beside it (make build writes bin/pipe and bin/pipe-wal)")
	}
	pipe := ""
	if exe, err := os.Executable(); err == nil {
		pipe = filepath.Join(filepath.Dir(exe), "pipe")
	}
	if _, err := os.Stat(pipe); err != nil {
		if pipe, err = exec.LookPath("pipe"); err != nil {
			return errors.New("pipe is neither beside pipe-wal nor on PATH: install both (make build writes bin/pipe and bin/pipe-wal)")
		}
	}
	err := syscall.Exec(pipe, append([]string{pipe, "wal"}, args...), os.Environ())
	return fmt.Errorf("starting %s: %w", pipe, err)
}
