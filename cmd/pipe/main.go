// Command pipe runs declarative backup and restore pipelines: a source, in-
// process stages (compress, encrypt, checksum) and sinks, with bounded memory.
//
// This package is the CLI only: flags, output and exit codes. Loading,
// planning and running live in pipefile, plan and runner.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Exit codes.
const (
	exitOK          = 0
	exitFailed      = 1   // a run failed
	exitInvalid     = 2   // bad usage or an invalid pipeline file
	exitInterrupted = 130 // SIGINT or SIGTERM
)

// exitError carries an exit code; its message, if any, is already printed.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

func main() {
	maybeServePlugins()
	os.Exit(execute(os.Stdout, os.Stderr, os.Args[1:]))
}

// execute runs the CLI and stops its plugins before returning the exit code.
func execute(stdout, stderr io.Writer, args []string) int {
	cmd, stop := newRootCmd(stdout, stderr)
	cmd.SetArgs(args)
	err := cmd.Execute()
	stop()
	return exitCode(err)
}

// exitCode prints an error not yet printed and returns the exit code.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(os.Stderr, "Error:", err)
	return exitInvalid
}
