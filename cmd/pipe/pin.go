package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/runner"
)

func (a *app) backupsPinCmd() *cobra.Command {
	var f storeFlags
	var reason string
	cmd := &cobra.Command{
		Use:   "pin FILE.hcl RUN",
		Short: "Keep a run whatever retention says, until it is unpinned",
		Long: `pin marks a run so that no retention deletes it: not the run's own
keep_last, keep_within or calendar rules, not pipe backups prune, and pipe
backups delete asks for --force. For the rules it counts as any run: a
pinned run among the 7 newest is one of keep_last = 7's. The pin is an
object beside the run's manifest (pipe-manifest.json.pin), which stays as
written; unpin removes it.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.pinOrUnpin(cmd, args, &f, func(ctx context.Context, s *runner.Store) (*catalog.Run, error) {
				return runner.PinRun(ctx, s, args[1], reason, time.Now())
			})
		},
	}
	f.register(cmd, false, true, true)
	cmd.Flags().StringVar(&reason, "reason", "", "why the run is kept (an audit, a legal hold), stored in the pin")
	return cmd
}

func (a *app) backupsUnpinCmd() *cobra.Command {
	var f storeFlags
	cmd := &cobra.Command{
		Use:   "unpin FILE.hcl RUN",
		Short: "Let retention delete a pinned run again",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.pinOrUnpin(cmd, args, &f, func(ctx context.Context, s *runner.Store) (*catalog.Run, error) {
				return runner.UnpinRun(ctx, s, args[1])
			})
		},
	}
	f.register(cmd, false, true, true)
	return cmd
}

// pinOrUnpin opens the file's store, does do to it and says what the run
// is now.
func (a *app) pinOrUnpin(cmd *cobra.Command, args []string, f *storeFlags, do func(context.Context, *runner.Store) (*catalog.Run, error)) error {
	ctx, stop := interruptible(cmd)
	defer stop()
	s, done, err := a.oneStore(ctx, args[0], f)
	if err != nil {
		return err
	}
	defer done()
	r, err := do(ctx, s)
	if err != nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return &exitError{exitFailed}
	}
	if f.json {
		return writeJSON(a.stdout, map[string]any{"store": s.Where(), "run_id": r.Manifest.RunID, "pinned": r.Pinned})
	}
	state := "pinned: no retention deletes it"
	if !r.Pinned {
		state = "not pinned: its retention rules apply"
	}
	fmt.Fprintf(a.stdout, "run %s (finished %s) is %s\n", r.Manifest.RunID, catalog.TimeText(r.Manifest.FinishedAt), state)
	return nil
}
