package spool

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// The values of an archive's background attribute: whether pipe wal push
// and fetch may start a process that outlives archive_command or
// restore_command (a background pusher, a prefetcher).
const (
	// BackgroundAuto starts one where PID 1 is an init pipe knows.
	BackgroundAuto = "auto"
	// BackgroundAlways starts one whatever PID 1 is: the operator says
	// orphans are reaped by something that is not PostgreSQL.
	BackgroundAlways = "always"
	// BackgroundNever never does: archive_command and restore_command
	// push ahead and prefetch themselves.
	BackgroundNever = "never"
)

// BackgroundModes are the background attribute's values.
var BackgroundModes = []string{BackgroundAuto, BackgroundAlways, BackgroundNever}

// initComm is where PID 1's name is read; a test points it elsewhere.
var initComm = "/proc/1/comm"

// knownInits are the names of PID 1 that reap orphans and ignore how they
// ended: systemd, and the inits containers and pods run.
var knownInits = map[string]bool{
	"systemd": true, "init": true, "tini": true, "docker-init": true, "dumb-init": true,
	"catatonit": true, "s6-svscan": true, "runit": true, "openrc-init": true, "pause": true,
}

// Background reports whether pipe wal may start a process that outlives
// the command PostgreSQL runs, under mode, and why.
//
// An orphan is reaped by PID 1. Where PID 1 is, or may become,
// PostgreSQL's postmaster, a background process is a hazard: the
// postmaster restarts the whole server when a child it does not know dies
// of a signal (the OOM killer, kill -9). The official image runs postgres
// as PID 1, and during its first start PID 1 is the entrypoint script,
// which then execs postgres and inherits every orphan. So auto allows one
// only where PID 1 is a known init; always is the operator's word that
// whatever PID 1 is reaps orphans and is not PostgreSQL.
func Background(mode string) (bool, string) {
	switch mode {
	case BackgroundAlways:
		return true, `background = "always"`
	case BackgroundNever:
		return false, `background = "never"`
	}
	b, err := os.ReadFile(initComm)
	if err != nil {
		return false, fmt.Sprintf("PID 1's name cannot be read (%v)", err)
	}
	name := strings.TrimSpace(string(b))
	if knownInits[name] {
		return true, fmt.Sprintf("PID 1 is %s, an init", name)
	}
	return false, fmt.Sprintf("PID 1 is %s, not an init pipe knows", name)
}

// SpawnSelf starts this program with args in the background (the pusher
// or the prefetcher); see Spawn.
func SpawnSelf(args []string, logPath string) (<-chan struct{}, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return Spawn(self, args, logPath)
}

// Spawn starts program with args in the background, in a session of its
// own (a signal to PostgreSQL's process group does not reach it), its
// output appended to logPath, which keeps one older log beside it. The
// channel it returns is closed when the program exits while this one
// runs; this one need not wait for it (when it exits first, the program
// is an orphan, which PID 1 reaps: see Background).
func Spawn(program string, args []string, logPath string) (<-chan struct{}, error) {
	if err := os.MkdirAll(filepath.Dir(logPath), 0o700); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(logPath); err == nil && fi.Size() > 8<<20 {
		_ = os.Rename(logPath, logPath+".1") // keep one old log: it stays bounded
	}
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer lf.Close()
	cmd := exec.Command(program, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // its status is in its log
		close(exited)
	}()
	return exited, nil
}
