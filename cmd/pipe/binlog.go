package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/signal"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/binlog"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/runner"
)

func (a *app) binlogCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "binlog",
		Short: "Archive MariaDB's binlog continuously, list, verify and fetch the archive",
		Long: `binlog archives a MariaDB server's binary log with an archive block of a
pipeline file that has a binlog block: the store, compression and
encryption, and where the server's binlog is.

  pipe binlog archive /etc/pipe/maria.hcl     # beside the server, as a service

Each file, the one being written included, is stored in segments as the
server writes it, so the archive trails the server by about max_lag.
Objects are created once and never overwritten, and named by the server's
id, the file, the byte range and the SHA-256 of the stored bytes: list and
verify check the archive without a key. A restore of a mariadb_backup run
replays them to a point in time (binlog_fetch = "pipe binlog fetch … %f %p").`,
	}
	cmd.AddCommand(a.binlogArchiveCmd(), a.binlogListCmd(), a.binlogVerifyCmd(), a.binlogFetchCmd())
	return cmd
}

// registerBinlogFlags registers the flags every pipe binlog command
// takes: those of pipe wal but the data directory.
func registerBinlogFlags(cmd *cobra.Command, f *walFlags, withJSON bool) {
	cmd.Flags().StringArrayVar(&f.vars, "var", nil, "set a variable: --var name=value (repeatable; also PIPE_VAR_name)")
	cmd.Flags().StringVar(&f.archive, "archive", "", "the archive block to use, when the file has several")
	if withJSON {
		cmd.Flags().BoolVar(&f.json, "json", false, "print JSON instead of text")
	}
}

// openBinlog loads a file and opens its binlog archive's store.
func (a *app) openBinlog(ctx context.Context, file string, f *walFlags, use archiveUse) (*plan.Archive, *binlog.Archive, func(), error) {
	pa, err := a.loadArchive(file, f, use)
	if err != nil {
		return nil, nil, nil, err
	}
	// Not exit 1: for pipe binlog fetch that says "not archived".
	ar, done, err := openArchiveWith(a, pa, exitInvalid, func() (*binlog.Archive, func(), error) { return runner.OpenBinlogArchive(ctx, pa, a.registry) })
	if err != nil {
		return nil, nil, nil, err
	}
	return pa, ar, done, nil
}

func (a *app) binlogArchiveCmd() *cobra.Command {
	var f walFlags
	var mf metricsFlags
	var once bool
	cmd := &cobra.Command{
		Use:   "archive FILE.hcl",
		Short: "Store the server's binlog files as it writes them, until stopped",
		Long: `archive reads the server's binlog files (the binlog block's path) and
stores every byte of them: the files the server has left at once, the one
it writes in segments of part_size, or sooner, when the oldest byte not
stored has waited max_lag. It goes on from what the archive holds, so a
restart (or a kill) loses nothing the server still has. It runs until
SIGINT or SIGTERM, storing what waits before it exits; --once stores what
the files hold now and exits. The metrics flags export
pipe_binlog_lag_seconds, pipe_binlog_stored_bytes_total,
pipe_binlog_segments_total and pipe_binlog_gaps_total.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			pa, ar, done, err := a.openBinlog(ctx, args[0], &f, archivePusher)
			if err != nil {
				return err
			}
			defer done()
			// loadArchive turned the collector off, as for a process that
			// lives for one file; this one runs for days.
			daemonGC(pusherGC)
			mx, err := a.startMetrics(&mf, args[0])
			if err != nil {
				return err
			}
			defer mx.close()
			r := &binlog.Archiver{Archive: ar, Base: pa.Binlog.Base, MaxLag: pa.Binlog.MaxLag, PartSize: pa.Binlog.PartSize, Log: a.log}
			mx.binlogArchiving(pa.Name, r)
			// A signal stops the loop; what waits is stored before exit.
			run, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			err = r.Run(run, once)
			if err == nil && !once {
				err = r.Run(ctx, true)
			}
			if err != nil {
				fmt.Fprintln(a.stderr, "Error:", scrub(err.Error(), a.walFile.Secrets()))
				return &exitError{exitFailed}
			}
			a.log.Info("binlog archive stopped", "archive", pa.Name, "bytes", r.Stored.Load(), "segments", r.Segments.Load())
			return nil
		},
	}
	registerBinlogFlags(cmd, &f, false)
	mf.register(cmd)
	cmd.Flags().BoolVar(&once, "once", false, "store what the files hold now, then exit")
	return cmd
}

func (a *app) binlogListCmd() *cobra.Command {
	var f walFlags
	cmd := &cobra.Command{
		Use:   "list FILE.hcl",
		Short: "List the binlog archive: servers, files, bytes, gaps",
		Long: `list reads the archive's object names (no object is read, no key is
needed) and prints, per server id, each file with the bytes archived from
its start and its segments, and any gap.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.binlogCheck(cmd, args[0], &f, false, false)
		},
	}
	registerBinlogFlags(cmd, &f, true)
	return cmd
}

func (a *app) binlogVerifyCmd() *cobra.Command {
	var f walFlags
	var decrypt bool
	cmd := &cobra.Command{
		Use:   "verify FILE.hcl",
		Short: "Check every archived binlog segment against its digest without a key, and that no byte or file is missing",
		Long: `verify reads every object of the binlog archive and checks its SHA-256
against the digest in its name, which needs read access and no key.
--decrypt also decrypts and decompresses each (with the archive's decrypt
block) and checks its length. A damaged object, a gap in a file or a file
missing between archived ones makes the exit status 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.binlogCheck(cmd, args[0], &f, true, decrypt)
		},
	}
	registerBinlogFlags(cmd, &f, true)
	cmd.Flags().BoolVar(&decrypt, "decrypt", false, "also decrypt and decompress every segment")
	return cmd
}

// binlogCheck is pipe binlog list (verify false) and verify.
func (a *app) binlogCheck(cmd *cobra.Command, file string, f *walFlags, verify, decrypt bool) error {
	ctx, stop := interruptible(cmd)
	defer stop()
	pa, ar, done, err := a.openBinlog(ctx, file, f, archiveReader(decrypt))
	if err != nil {
		return err
	}
	defer done()
	if decrypt && pa.Encrypt != nil && pa.Decrypt == nil {
		fmt.Fprintf(a.stderr, "Error: --decrypt needs the archive's decrypt block: archive %q { decrypt { identities = [file(\"…\")] } }\n", pa.Name)
		return &exitError{exitInvalid}
	}
	l, err := ar.List(ctx)
	if err != nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return &exitError{exitFailed}
	}
	var problems []binlog.Problem
	checked := 0
	if verify {
		if problems, checked, err = ar.Verify(ctx, l, decrypt); err != nil {
			if ctx.Err() != nil {
				return &exitError{exitInterrupted}
			}
			fmt.Fprintln(a.stderr, "Error:", err)
			return &exitError{exitFailed}
		}
	}
	if f.json {
		out := map[string]any{"archive": pa.Name, "servers": l.Servers}
		if verify {
			out["problems"], out["segments_checked"], out["ok"] = problems, checked, len(problems) == 0
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		w := a.stdout
		fmt.Fprintf(w, "binlog archive %q: %d server(s)\n", pa.Name, len(l.Servers))
		for _, id := range slices.Sorted(maps.Keys(l.Servers)) {
			fmt.Fprintf(w, "server_id %d\n", id)
			for _, bf := range l.Servers[id] {
				gap := ""
				if bf.Gap >= 0 {
					gap = fmt.Sprintf("  GAP from byte %d", bf.Gap)
				}
				fmt.Fprintf(w, "  %-24s %12d bytes  %4d segment(s)%s\n", bf.Name, bf.End, len(bf.Segments), gap)
			}
		}
		if verify {
			for _, p := range problems {
				fmt.Fprintf(w, "BAD %s: %s\n", p.Key, p.What)
			}
			fmt.Fprintf(w, "verified %d segment(s): %d problem(s)\n", checked, len(problems))
		}
	}
	if len(problems) > 0 {
		return &exitError{exitFailed}
	}
	return nil
}

func (a *app) binlogFetchCmd() *cobra.Command {
	var f walFlags
	var server string
	cmd := &cobra.Command{
		Use:   "fetch FILE.hcl NAME DEST",
		Short: "Restore one archived binlog file (as far as its bytes are contiguous) to DEST",
		Long: `fetch restores the binlog file NAME (e.g. mysql-bin.000042) of the
archive's server (--server-id when it holds several) to DEST, checking each
segment's digest and decrypting it with the archive's decrypt block. Exit
status 1 means the archive holds nothing of NAME (the end of the archive,
for a replay); 2 and more, a failure. A restore's binlog_fetch runs it:
"pipe binlog fetch /etc/pipe/maria.hcl %f %p".`,
		Args: cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			pa, ar, done, err := a.openBinlog(ctx, args[0], &f, archiveReader(true))
			if err != nil {
				return err
			}
			defer done()
			if pa.Encrypt != nil && pa.Decrypt == nil {
				fmt.Fprintf(a.stderr, "Error: archive %q encrypts its segments and has no decrypt block to open them: add decrypt { identities = [file(\"…\")] }\n", pa.Name)
				return &exitError{exitInvalid}
			}
			l, err := ar.List(ctx)
			if err != nil {
				fmt.Fprintln(a.stderr, "Error:", err)
				return &exitError{exitFailed + 1}
			}
			id, err := chooseServer(l, server)
			if err != nil {
				fmt.Fprintf(a.stderr, "Error: archive %q: %v\n", pa.Name, err)
				return &exitError{exitInvalid}
			}
			start := time.Now()
			n, err := ar.Fetch(ctx, l, id, args[1], args[2])
			switch {
			case errors.Is(err, binlog.ErrNotArchived):
				a.log.Info("not archived", "file", args[1], "server_id", id)
				return &exitError{exitFailed}
			case err != nil:
				fmt.Fprintln(a.stderr, "Error:", err)
				return &exitError{exitFailed + 1}
			}
			a.log.Info("fetched", "file", args[1], "server_id", id, "bytes", n, "seconds", time.Since(start).Seconds())
			return nil
		},
	}
	registerBinlogFlags(cmd, &f, false)
	cmd.Flags().StringVar(&server, "server-id", "", "the server whose file to fetch, when the archive holds several")
	return cmd
}

// chooseServer is the server --server-id names, or the archive's only
// one.
func chooseServer(l *binlog.Listing, flag string) (uint32, error) {
	if flag != "" {
		n, err := strconv.ParseUint(flag, 10, 32)
		if err != nil {
			return 0, fmt.Errorf("--server-id %q is not a server id", flag)
		}
		return uint32(n), nil
	}
	ids := slices.Sorted(maps.Keys(l.Servers))
	switch len(ids) {
	case 0:
		return 0, errors.New("it holds no binlog yet")
	case 1:
		return ids[0], nil
	}
	return 0, fmt.Errorf("it holds the binlogs of servers %v: choose one with --server-id", ids)
}
