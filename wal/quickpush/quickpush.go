// Package quickpush is pipe-wal: pipe wal push for archive_command, quick
// to start. With push { async = true } and a background pusher, most of
// the commands PostgreSQL starts, one per segment, only find their file
// archived already (the pusher's note in the spool) or wait for it; pipe,
// which links every store's SDK, spends 10-17 ms of CPU starting up for
// that, and on a server writing WAL in a burst those starts compete with
// the pusher for the same CPUs. This package links no store, codec or
// hash (package spool answers, package archiveattrs reads the archive's
// literal settings from the file's text): an answer costs about 3 ms of
// CPU, where one that linked packages wal and pipefile cost 5-7. It
// answers for a file the pusher noted (or notes while it waits), and
// otherwise hands the command
// to pipe wal with the same arguments (exec: PostgreSQL sees one process
// and pipe's exit status). Without a background pusher (background =
// "never", or PostgreSQL as PID 1) each archive_command that starts a
// store sends the next ready files with its own and notes them: pipe-wal
// answers for those too.
//
// As restore_command (pipe-wal fetch) it takes a segment the prefetcher
// (or an earlier restore_command) brought into the prefetch spool, with a
// rename, when nothing else is to be done (a prefetcher runs, or the next
// segments are spooled): recovery asks for hundreds of segments in a row,
// and pipe's start (28 ms, and 55 MiB of a large binary mapped) would be
// most of each one's cost. Where a background prefetcher may run and none
// does, it starts one (pipe beside it) and waits for its segment in the
// spool, so that no pipe runs beside the prefetcher.
//
// It starts the background pusher and the prefetcher itself; everything
// else it does not answer for, pipe does: a failure the pusher noted, a
// note whose file's identity changed (its digest decides), a file no push
// sent ahead, a synchronous push, a segment no prefetcher
// brought, flags other than --archive, --pgdata and --var, and every
// other pipe wal command. A fetch it can neither answer nor hand over
// exits 255, which stops recovery (1 would end it early).
package quickpush

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/pipebackup/pipe/pipefile/archiveattrs"
	"github.com/pipebackup/pipe/wal/spool"
)

// Main runs pipe-wal with args (without the program's name) and returns
// its exit status, unless it handed the command to pipe.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if answered(ctx, args) {
		return 0
	}
	failed := failedStatus(args)
	if ctx.Err() != nil {
		fmt.Fprintln(os.Stderr, "Error: pipe-wal: interrupted; PostgreSQL will try again")
		return failed
	}
	stop()
	err := delegate(args)
	fmt.Fprintln(os.Stderr, "Error: pipe-wal:", err)
	return failed
}

// failedStatus is pipe-wal's exit status when it neither answered nor
// handed over: 1 for a push (archive_command tries again), but 255 for a
// fetch, since restore_command's 1 says "not archived" and would end
// recovery early, at the wrong point; PostgreSQL stops recovery on a
// status above 125 instead (as pipe wal fetch's failures do).
func failedStatus(args []string) int {
	if len(args) > 0 && args[0] == "fetch" {
		return 255
	}
	return 1
}

// push is a pipe wal push's or fetch's arguments, when pipe-wal may
// answer it: the file, and the push's path (%p) or the fetch's segment
// name and destination (%f, %p).
type push struct {
	command, file, path, name, archive, pgdata string
	vars                                       []string // --var's values
}

// parsePush returns args as a push or fetch pipe-wal may answer, or
// false.
func parsePush(args []string) (push, bool) {
	p := push{pgdata: "."}
	if len(args) == 0 || (args[0] != "push" && args[0] != "fetch") {
		return p, false
	}
	p.command = args[0]
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
		case "--var":
			p.vars = append(p.vars, value)
		}
	}
	switch {
	case p.command == "push" && len(pos) == 2:
		p.file, p.path = pos[0], pos[1]
	case p.command == "fetch" && len(pos) == 3:
		p.file, p.name, p.path = pos[0], pos[1], pos[2]
	default:
		return push{}, false
	}
	return p, true
}

// answered reports whether args are a push of a file the background
// pusher, or an earlier push, has archived, or a fetch of a segment the
// prefetch spool holds, which pipe-wal then answers (exit 0).
func answered(ctx context.Context, args []string) bool {
	p, ok := parsePush(args)
	if !ok {
		return false
	}
	s, err := archiveattrs.ReadLiteral(p.file, p.archive)
	if err != nil || !slices.Contains(spool.BackgroundModes, s.Background) {
		return false
	}
	c := &spool.Command{DataDir: p.pgdata, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Settings: spool.Settings{Async: s.Async, Background: s.Background, PushSpool: s.Spool, PushTimeout: s.Timeout,
			Prefetch: s.Prefetch, FetchSpool: s.FetchSpool, SegmentSize: uint32(s.SegmentSize)}}
	// A background pusher or prefetcher to start: pipe-wal starts it
	// (pipe beside it, with the arguments pipe would give it) rather than
	// hand over to a pipe that would start it, and wait beside it, for
	// this one file.
	if pipe, err := pipeProgram(); err == nil {
		c.Spawn = func(args []string, logPath string) (<-chan struct{}, error) { return spool.Spawn(pipe, args, logPath) }
		c.BackgroundArgs = append([]string{p.file, "--archive", s.Archive, "--pgdata", p.pgdata}, varArgs(p.vars)...)
	}
	if p.command == "fetch" {
		if s.SystemID != "" {
			if c.Settings.SystemID, err = strconv.ParseUint(s.SystemID, 10, 64); err != nil {
				return false // pipe says what is wrong with it
			}
		}
		return c.AnswerFetch(ctx, p.name, p.path)
	}
	if !s.Async {
		return false
	}
	return c.Answer(ctx, p.path) != ""
}

// varArgs are --var flags for values.
func varArgs(values []string) []string {
	var out []string
	for _, v := range values {
		out = append(out, "--var", v)
	}
	return out
}

// pipeProgram is the pipe that pipe-wal hands over to: the one beside
// this program, else the one on PATH.
func pipeProgram() (string, error) {
	if exe, err := os.Executable(); err == nil {
		pipe := filepath.Join(filepath.Dir(exe), "pipe")
		if _, err := os.Stat(pipe); err == nil {
			return pipe, nil
		}
	}
	pipe, err := exec.LookPath("pipe")
	if err != nil {
		return "", errors.New("pipe is neither beside pipe-wal nor on PATH: install both (make build writes bin/pipe and bin/pipe-wal)")
	}
	return pipe, nil
}

// delegate replaces this process with pipe wal and args: the pipe beside
// this program, else the one on PATH. It returns only when it could not.
func delegate(args []string) error {
	if len(args) > 0 && args[0] == "wal" {
		// What pipe-wal hands over starts with wal: this is the hand-over,
		// and the program named pipe is pipe-wal.
		return errors.New("the pipe it runs is pipe-wal itself: install pipe beside it (make build writes bin/pipe and bin/pipe-wal)")
	}
	pipe, err := pipeProgram()
	if err != nil {
		return err
	}
	err = syscall.Exec(pipe, append([]string{pipe, "wal"}, args...), os.Environ())
	return fmt.Errorf("starting %s: %w", pipe, err)
}
