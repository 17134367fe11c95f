package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// cmdTimeout bounds any one measured command.
const cmdTimeout = 30 * time.Minute

// measurement is one timed command (or sequence of commands).
type measurement struct {
	wall    time.Duration
	cpu     time.Duration // user + system time of the process and its waited-for children
	maxRSS  int64         // bytes; the largest of the process and its waited-for children
	treeRSS int64         // bytes; the peak of the process and its same-binary descendants, summed
	treePSS int64         // the same, of PSS (shared pages divided among their sharers)
	stdout  []byte
	summary *pipelineRun // pipe's own account of the run, when it was `pipe run --json`
	// long counts, of a loop of commands played as PostgreSQL runs them
	// (the WAL bench's archiver and recovery), those that took longCommand
	// or more, and longWall is their time: where pipe pushes or fetches a
	// batch in the command itself, its batches.
	long     int
	longWall time.Duration
}

// longCommand is how long a command of a played loop takes to count as
// long (measurement.long): a batch, not an answer from the spool.
const longCommand = 50 * time.Millisecond

// addCommand adds one command of a played loop to the loop's total.
func (m *measurement) addCommand(c measurement) {
	m.cpu += c.cpu
	m.maxRSS = max(m.maxRSS, c.maxRSS)
	if c.wall >= longCommand {
		m.long++
		m.longWall += c.wall
	}
}

// timeCommands runs the commands one after the other, without a shell, with
// env added to the environment, and returns their total wall time, from the
// first start to the last exit.
func timeCommands(ctx context.Context, env []string, cmds ...[]string) (measurement, error) {
	var m measurement
	for _, argv := range cmds {
		r, err := timeCommand(ctx, argv, env...)
		m.wall += r.wall
		m.cpu += r.cpu
		m.maxRSS = max(m.maxRSS, r.maxRSS)
		m.treeRSS = max(m.treeRSS, r.treeRSS)
		m.treePSS = max(m.treePSS, r.treePSS)
		m.stdout = append(m.stdout, r.stdout...)
		if err != nil {
			return m, err
		}
	}
	return m, nil
}

func timeCommand(ctx context.Context, argv []string, env ...string) (measurement, error) {
	return runCommand(ctx, argv, false, env...)
}

// timeCommandRSS is timeCommand that also follows the summed memory of the
// process tree (treeRSS), sampling /proc every 20 ms: only the memory
// benchmark pays for that.
func timeCommandRSS(ctx context.Context, argv []string, env ...string) (measurement, error) {
	return runCommand(ctx, argv, true, env...)
}

func runCommand(ctx context.Context, argv []string, sampleTree bool, env ...string) (measurement, error) {
	return runCommandIn(ctx, "", argv, sampleTree, env...)
}

// runCommandIn is runCommand in the folder dir ("" the working one).
func runCommandIn(ctx context.Context, dir string, argv []string, sampleTree bool, env ...string) (measurement, error) {
	return runCommandAs(ctx, dir, nil, argv, sampleTree, env...)
}

// runCommandAs is runCommandIn as the user cred names (nil: this one).
func runCommandAs(ctx context.Context, dir string, cred *syscall.Credential, argv []string, sampleTree bool, env ...string) (measurement, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	start := time.Now()
	err := cmd.Start()
	var tree, treePSS int64
	if err == nil && sampleTree {
		s := sampleRSS(cmd.Process.Pid)
		err = cmd.Wait()
		tree, treePSS = s.Peak()
	} else if err == nil {
		err = cmd.Wait()
	}
	m := measurement{wall: time.Since(start), stdout: stdout.Bytes(), treeRSS: tree, treePSS: treePSS}
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			m.maxRSS = ru.Maxrss << 10 // KiB on Linux
			m.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
	}
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if len(msg) > 2000 {
			msg = "…" + msg[len(msg)-2000:]
		}
		return m, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, msg)
	}
	return m, nil
}

// needTools fails on the first of tools that look cannot find, saying
// how to install it (hint).
func needTools(look func(string) (string, error), hint string, tools ...string) error {
	for _, tool := range tools {
		if _, err := look(tool); err != nil {
			return fmt.Errorf("%s is not installed (%s)", tool, hint)
		}
	}
	return nil
}

// settle makes the disk quiet before a measurement: whatever the previous
// run left dirty is written now, outside any timing.
func settle() {
	syscall.Sync()
}

// warm reads a file once so every tool starts from the page cache.
func warm(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}
