package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/runner"
	"github.com/pipebackup/pipe/wal"
	"github.com/pipebackup/pipe/wal/spool"
	"github.com/pipebackup/pipe/wal/walname"
)

// exitStopRecovery is what pipe wal fetch exits with when it failed for
// another reason than a file that is not archived: PostgreSQL takes an
// exit status above 125 as fatal and stops recovery, instead of ending it
// (and promoting) at the wrong point.
const exitStopRecovery = 255

// exitNotArchived is pipe wal fetch's exit status for a file that is not
// in the archive: recovery then ends, or turns to streaming.
const exitNotArchived = 1

// walFlags are the flags of the pipe wal commands.
type walFlags struct {
	vars    []string
	archive string
	pgdata  string
	json    bool
}

func (f *walFlags) register(cmd *cobra.Command, withJSON bool) {
	cmd.Flags().StringArrayVar(&f.vars, "var", nil, "set a variable: --var name=value (repeatable; also PIPE_VAR_name)")
	cmd.Flags().StringVar(&f.archive, "archive", "", "the archive block to use, when the file has several")
	cmd.Flags().StringVarP(&f.pgdata, "pgdata", "D", ".", "the data directory: where global/pg_control, pg_wal and the spools are (PostgreSQL runs archive_command and restore_command in it)")
	if withJSON {
		cmd.Flags().BoolVar(&f.json, "json", false, "print JSON instead of text")
	}
}

// args are the flags to give a background pipe wal process started for
// this one.
func (f *walFlags) args(file, archive string) []string {
	out := []string{file, "--archive", archive, "--pgdata", f.pgdata}
	for _, v := range f.vars {
		out = append(out, "--var", v)
	}
	return out
}

func (a *app) walCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wal",
		Short: "Archive PostgreSQL's WAL: archive_command (push), restore_command (fetch), list and verify the archive",
		Long: `wal is PostgreSQL continuous archiving with the archive block of a pipeline
file: the store, compression and encryption, written once for push and
fetch.

  archive_command = 'pipe wal push /etc/pipe/pg.hcl %p'
  restore_command = 'pipe wal fetch /etc/pipe/pg.hcl %f %p'

Objects are laid out per system identifier and timeline, and named by the
digests of the file (XXH3-128) and of the stored bytes (SHA-256): a second push of the same
file writes nothing, a different file under an archived name is refused,
and list and verify check the archive without a key.`,
	}
	cmd.AddCommand(a.walPushCmd(), a.walFetchCmd(), a.walListCmd(), a.walVerifyCmd())
	return cmd
}

// openArchive loads a file and opens its archive's store. The built-in
// stores run in this process: archive_command and restore_command start
// one pipe per file, and a plugin process would double that.
func (a *app) openArchive(ctx context.Context, file string, f *walFlags, decrypt bool) (*plan.Archive, *wal.Archive, func(), error) {
	pa, err := a.loadArchive(file, f, archiveReader(decrypt))
	if err != nil {
		return nil, nil, nil, err
	}
	ar, done, err := a.openStore(ctx, pa, f)
	return pa, ar, done, err
}

// archiveUse is what a pipe wal command reads of an archive's keys: the
// private ones only where it uses them. Push reads the signing key and
// neither the decrypting key nor the trusted keys; fetch, list and verify
// read the trusted keys and never the signing key, and the decrypting key
// when they decode.
type archiveUse struct{ decrypt, sign bool }

var archivePusher = archiveUse{sign: true}

func archiveReader(decrypt bool) archiveUse { return archiveUse{decrypt: decrypt} }

// loadArchive loads a file and resolves its archive. It sizes the Go
// heap for the archive's budget: no collection until the budget is near.
// A pipe wal process lives for one file, and a collector that runs as its
// heap doubles from a few MiB to a segment's three copies costs more than
// the segment's SHA-256.
func (a *app) loadArchive(file string, f *walFlags, use archiveUse) (*plan.Archive, error) {
	a.inprocess = true
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(plan.RuntimeMemory + 64<<20) // until the budget is known
	p, err := a.load(file, &loadFlags{vars: f.vars, running: true, skipDecrypt: !use.decrypt, skipSign: !use.sign, skipTrust: use.sign}, "")
	if err != nil {
		return nil, err
	}
	pa, err := p.Archive(f.archive)
	if err != nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return nil, &exitError{exitInvalid}
	}
	debug.SetMemoryLimit(pa.GoMemoryLimit())
	a.walFile = p.File
	return pa, nil
}

// daemonGC turns the collector back on in a process that handles many
// files: one that outlives the command PostgreSQL runs (the background
// pusher, the prefetcher), or a restore_command that prefetches more than
// wal.PrefetchAtOnce segments itself, where nothing may outlive it.
// loadArchive turned it off for one file's life, and over many files the
// garbage would grow to the memory limit, the archive's whole budget (1.7
// GiB of RSS for a prefetcher in the basebackup bench, where pgBackRest's
// async archive-get held 70 MiB; 84 MiB for a restore_command fetching 64
// segments in the WAL bench, 65 MiB with the collector on). percent is
// the collector's GOGC.
//
// An archive_command that sends files ahead itself (16 with 4 workers)
// keeps it off: sending 64 at GOGC 25, its peak was 81 MiB instead of 95,
// but the bench's burst of 256 took 1.5 s more CPU.
func daemonGC(percent int) { debug.SetGCPercent(percent) }

// pusherGC is the background pusher's GOGC. Its live heap is large and
// steady (each worker's segment and compressed buffer, pooled: 130-160
// MiB with 4 workers) and nearly all of it is pointer-free buffers, which
// the collector does not scan: a collection costs little, and with the
// default 100 the heap grew to twice the live one (437 MiB of RSS in the
// WAL bench's burst, where pgBackRest's async process held 74 MiB). At 25
// it held 261 MiB and used 1.2 s less CPU over the burst's 4 GiB (fewer
// fresh pages to fault in). Files now stream through both (a few MiB of
// live heap), and most of what they allocate is short-lived (each
// request's buffers, each object's ranges): at 25 the heap stays near the
// live one, at 100 the prefetcher held 25 MiB more of RSS in the WAL
// bench for no speed.
const (
	pusherGC     = 25
	prefetcherGC = 25
)

// openStore opens the archive's store.
func (a *app) openStore(ctx context.Context, pa *plan.Archive, f *walFlags) (*wal.Archive, func(), error) {
	return openArchiveWith(a, pa, exitFailed, func() (*wal.Archive, func(), error) { return runner.OpenArchive(ctx, pa, a.registry, f.pgdata) })
}

// openArchiveWith refuses a store whose attributes wait on variables not
// given, then opens the archive with open, reporting its failure as
// pipe wal and pipe binlog do: diagnostics at their place (exit 2), any
// other error scrubbed of secrets (exit failed).
func openArchiveWith[T any](a *app, pa *plan.Archive, failed int, open func() (T, func(), error)) (T, func(), error) {
	var none T
	if unknown := unknownAttrs(pa.Def.Store); len(unknown) > 0 {
		fmt.Fprintf(a.stderr, "Error: archive %q: store %s: %s not known: give the variables they use (--var name=value or PIPE_VAR_name)\n", pa.Name, pa.Def.Store.Type, strings.Join(unknown, ", "))
		return none, nil, &exitError{exitInvalid}
	}
	ar, done, err := open()
	if err != nil {
		var de *runner.DiagError
		if errors.As(err, &de) {
			a.printDiags(a.walFile, de.Diags)
			return none, nil, &exitError{exitInvalid}
		}
		fmt.Fprintln(a.stderr, "Error:", scrub(err.Error(), a.walFile.Secrets()))
		return none, nil, &exitError{failed}
	}
	return ar, done, nil
}

// unknownAttrs names the attributes of an endpoint not known yet (they use
// variables not given).
func unknownAttrs(e *pipefile.Endpoint) []string {
	var out []string
	for name := range e.Unknown {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}

func (a *app) walPushCmd() *cobra.Command {
	var f walFlags
	var mf metricsFlags
	var background bool
	cmd := &cobra.Command{
		Use:   "push FILE.hcl PATH",
		Short: "Archive one WAL file, as archive_command: pipe wal push FILE.hcl %p",
		Long: `push compresses, encrypts and stores the WAL file at PATH (a segment, a
timeline history, a backup label or a partial segment) in the file's
archive, and exits 0 once it is durable in the store. The same content
pushed again exits 0 with a notice; other content under a name already
archived exits 1 and the archive keeps the original.

With push { async = true } in the archive, the files PostgreSQL marked
ready (pg_wal/archive_status/*.ready) are pushed ahead, workers at once:
by a background pusher that push starts (the archive's background
attribute: by default where PID 1 is a known init, systemd, tini, ...),
else by push itself, which then returns once its file and the next ready
ones are durable. Any failure exits 1: PostgreSQL keeps
the file and tries again. With sign { key } in the archive, each object's
name is signed with that key.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if background {
				return cobra.ExactArgs(1)(cmd, args)
			}
			return cobra.ExactArgs(2)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			pa, err := a.loadArchive(args[0], &f, archivePusher)
			if err != nil {
				return err
			}
			mx, err := a.startMetrics(&mf, args[0])
			if err != nil {
				return err
			}
			defer mx.close()
			c := a.walCommand(args[0], pa, &f, mx)
			if background {
				daemonGC(pusherGC)
				if err := c.RunPusher(ctx); err != nil && !isExit(err) {
					a.log.Error("the background pusher", "error", err)
				}
				return nil // exit 0: an orphan's other status would make a postmaster that reaps it restart the server
			}
			name := filepath.Base(args[1])
			if _, err := walname.ParseName(name); err != nil {
				fmt.Fprintln(a.stderr, "Error:", err)
				return &exitError{exitInvalid}
			}
			r, err := c.Push(ctx, args[1])
			return a.reportPush(pa, mx, name, r, err)
		},
	}
	f.register(cmd, false)
	mf.register(cmd)
	cmd.Flags().BoolVar(&background, "background", false, "run the background pusher (push starts it)")
	_ = cmd.Flags().MarkHidden("background") // started by push itself
	return cmd
}

// reportPush prints how a push went, and gives its exit status.
func (a *app) reportPush(pa *plan.Archive, mx *runMetrics, name string, r *wal.PushResult, err error) error {
	switch {
	case err != nil:
		fmt.Fprintf(a.stderr, "Error: pipe wal push %s: %s\n", name, err)
		return &exitError{exitFailed}
	case r.Ahead:
		mx.walPushed(pa.Name, r)
		a.log.Info("archived already: pushed ahead", "file", name, "object", r.Key)
	case r.Already:
		a.log.Warn("archived already with the same content: nothing written", "file", name, "object", r.Key)
	default:
		a.log.Info("archived", "file", name, "object", r.Key, "bytes", r.Bytes, "stored", r.Stored)
	}
	return nil
}

// walCommand is what pipe wal push and fetch do with the archive pa of
// file: the flow lives in package wal; this gives it the store, the
// metrics and the way to start a background pipe.
func (a *app) walCommand(file string, pa *plan.Archive, f *walFlags, mx *runMetrics) *wal.Command {
	return &wal.Command{
		Command: spool.Command{
			Settings: spool.Settings{Async: pa.Async, Background: pa.Background, Workers: pa.Workers, MaxBacklog: pa.MaxBacklog,
				PushSpool: pa.PushSpool, FetchSpool: pa.FetchSpool, PushTimeout: time.Duration(pa.PushTimeout),
				Prefetch: pa.Prefetch, Retries: pa.Retries, SystemID: pa.SystemID, SegmentSize: uint32(pa.SegmentSize)},
			DataDir:        f.pgdata,
			Spawn:          spool.SpawnSelf,
			BackgroundArgs: f.args(file, pa.Name),
			Log:            a.log,
		},
		Open:         func(ctx context.Context) (*wal.Archive, func(), error) { return a.openStore(ctx, pa, f) },
		Pushed:       func(r *wal.PushResult) { mx.walPushed(pa.Name, r) },
		Backlog:      func(waiting int, exceeded bool) { mx.walBacklog(pa.Name, waiting, exceeded) },
		Fetched:      func(from string) { mx.walFetched(pa.Name, from) },
		BacklogAlert: func(waiting int) { a.notifyBacklog(file, pa, waiting) },
	}
}

// isExit reports whether err is an exit status whose message was printed.
func isExit(err error) bool {
	var ee *exitError
	return errors.As(err, &ee)
}

func (a *app) walFetchCmd() *cobra.Command {
	var f walFlags
	var mf metricsFlags
	var prefetchAfter string
	cmd := &cobra.Command{
		Use:   "fetch FILE.hcl NAME PATH",
		Short: "Restore one WAL file, as restore_command: pipe wal fetch FILE.hcl %f %p",
		Long: `fetch reads the archived file NAME, checks its digests, decrypts and
decompresses it, and writes it to PATH atomically. Its exit status follows
PostgreSQL's rules: 0 restored; 1 the file is not in the archive (recovery
ends there, or turns to streaming); 255 for any other failure once the
archive's fetch { retries } are spent, which PostgreSQL takes as fatal:
recovery stops, rather than end early at the wrong point. With trust
{ keys } in the archive, only an object whose name a trusted key signed is
fetched: one that none signed is such a failure.

With fetch { prefetch = N }, the N segments after the one asked for are
brought into a spool, all at once, and the next fetch takes its segment
from there with a rename: by a background prefetcher (the archive's
background attribute: by default where PID 1 is a known init), else by
fetch itself before it returns.`,
		Args: func(cmd *cobra.Command, args []string) error {
			n := 3
			if prefetchAfter != "" {
				n = 1
			}
			if err := cobra.ExactArgs(n)(cmd, args); err != nil {
				fmt.Fprintln(a.stderr, "Error:", err)
				return &exitError{exitStopRecovery}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			err := a.walFetch(ctx, args, &f, &mf, prefetchAfter)
			if prefetchAfter != "" {
				return nil // see walFetch: a background prefetcher exits 0
			}
			var ee *exitError
			if errors.As(err, &ee) && ee.code != exitNotArchived && ee.code != 0 {
				// A bad flag or file must not end recovery early either.
				return &exitError{exitStopRecovery}
			}
			return err
		},
	}
	f.register(cmd, false)
	mf.register(cmd)
	cmd.Flags().StringVar(&prefetchAfter, "prefetch-after", "", "run the background prefetcher for the segments after `NAME` (fetch starts it)")
	_ = cmd.Flags().MarkHidden("prefetch-after") // started by fetch itself
	// A usage error exits with exitStopRecovery too.
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		fmt.Fprintln(a.stderr, "Error:", err)
		return &exitError{exitStopRecovery}
	})
	return cmd
}

func (a *app) walFetch(ctx context.Context, args []string, f *walFlags, mf *metricsFlags, prefetchAfter string) error {
	pa, err := a.loadArchive(args[0], f, archiveReader(true))
	if err != nil {
		return err
	}
	mx, err := a.startMetrics(mf, args[0])
	if err != nil {
		return err
	}
	defer mx.close()
	c := a.walCommand(args[0], pa, f, mx)
	if prefetchAfter != "" {
		daemonGC(prefetcherGC)
		// Exit 0 whatever happens: in a container the postmaster is
		// often PID 1 and reaps this orphan, and it restarts the server
		// when a child it does not know exits with another status than
		// 0 or 1. What failed is in the spool's prefetch.log, and fetch
		// fetches what is not spooled itself.
		if err := c.RunPrefetcher(ctx, prefetchAfter); err != nil && !isExit(err) {
			a.log.Error("the background prefetcher", "error", err)
		}
		return nil
	}
	if pa.Prefetch > wal.PrefetchAtOnce && !c.BackgroundAllowed() {
		daemonGC(prefetcherGC) // a batch of more segments than one round holds
	}
	name, dest := args[1], args[2]
	if _, err := walname.ParseName(name); err != nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return &exitError{exitStopRecovery}
	}
	from, err := c.Fetch(ctx, name, dest)
	switch {
	case err == nil:
		a.log.Info("restored", "file", name, "from", from)
		return nil
	case isExit(err):
		return err // the store would not open: said already
	case errors.Is(err, wal.ErrNotArchived):
		a.log.Info("not in the archive", "file", name)
		return &exitError{exitNotArchived}
	case errors.Is(err, wal.ErrHole):
		fmt.Fprintf(a.stderr, "Error: pipe wal fetch %s: %s; stopping recovery (exit %d) at the gap rather than ending it there and losing what follows\n", name, err, exitStopRecovery)
	default:
		fmt.Fprintf(a.stderr, "Error: pipe wal fetch %s: %s; stopping recovery (exit %d) rather than ending it early: fix the store and start PostgreSQL again\n", name, err, exitStopRecovery)
	}
	return &exitError{exitStopRecovery}
}

func (a *app) walListCmd() *cobra.Command {
	var f walFlags
	var mf metricsFlags
	cmd := &cobra.Command{
		Use:   "list FILE.hcl",
		Short: "List the WAL archive: segments per cluster and timeline, gaps, history files, the newest segment's age",
		Long: `list reads the archive's object names (no object is read, no key is
needed) and prints, per system identifier and timeline, the segments from
the first to the last, every gap between them, the history, backup-label
and partial files, and how long ago the newest segment was archived. The
metrics flags export pipe_wal_segments, pipe_wal_missing_segments and
pipe_wal_newest_segment_age_seconds, for alerting on archive lag.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.walCheck(cmd, args[0], &f, &mf, false, false)
		},
	}
	f.register(cmd, true)
	mf.register(cmd)
	return cmd
}

func (a *app) walVerifyCmd() *cobra.Command {
	var f walFlags
	var mf metricsFlags
	var decrypt bool
	cmd := &cobra.Command{
		Use:   "verify FILE.hcl",
		Short: "Check every archived WAL file against its digest without a key, and that no segment is missing",
		Long: `verify reads every object of the archive and checks its SHA-256 against
the digest in its name, which needs read access and no key. --decrypt also
decrypts and decompresses each (with the archive's decrypt block) and
checks the file's own SHA-256. A gap between segments of a timeline, a
damaged object or a file archived twice with different content makes the
exit status 1.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.walCheck(cmd, args[0], &f, &mf, true, decrypt)
		},
	}
	f.register(cmd, true)
	mf.register(cmd)
	cmd.Flags().BoolVar(&decrypt, "decrypt", false, "also decrypt and decompress every file and check its own digest")
	return cmd
}

// walCheck is pipe wal list (verify false) and pipe wal verify.
func (a *app) walCheck(cmd *cobra.Command, file string, f *walFlags, mf *metricsFlags, verify, decrypt bool) error {
	ctx, stop := interruptible(cmd)
	defer stop()
	pa, ar, done, err := a.openArchive(ctx, file, f, decrypt)
	if err != nil {
		return err
	}
	defer done()
	if decrypt && ar.Decrypt == nil && (ar.Encrypt != nil) {
		fmt.Fprintf(a.stderr, "Error: --decrypt needs the archive's decrypt block: archive %q { decrypt { identities = [file(\"…\")] } }\n", pa.Name)
		return &exitError{exitInvalid}
	}
	mx, err := a.startMetrics(mf, file)
	if err != nil {
		return err
	}
	defer mx.close()
	l, err := ar.List(ctx)
	if err != nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return &exitError{exitFailed}
	}
	var rep *wal.VerifyReport
	if verify {
		if rep, err = ar.Verify(ctx, l, decrypt, 8); err != nil {
			if ctx.Err() != nil {
				return &exitError{exitInterrupted}
			}
			fmt.Fprintln(a.stderr, "Error:", err)
			return &exitError{exitFailed}
		}
	}
	ok := len(l.Duplicates) == 0 && len(l.Untrusted) == 0 && (rep == nil || (len(rep.Bad) == 0 && l.Gaps() == 0 && len(rep.Labels) == 0))
	mx.walChecked(pa.Name, l, rep, ok)
	if f.json {
		out := map[string]any{"archive": pa.Name, "listing": l}
		if rep != nil {
			out["verify"], out["ok"] = rep, ok
		}
		if err := writeJSON(a.stdout, out); err != nil {
			return err
		}
	} else {
		printWAL(a, pa, ar, l, rep)
	}
	if !ok {
		return &exitError{exitFailed}
	}
	return nil
}

func printWAL(a *app, pa *plan.Archive, ar *wal.Archive, l *wal.Listing, rep *wal.VerifyReport) {
	w := a.stdout
	fmt.Fprintf(w, "archive %q: store %s %q\n", pa.Name, pa.Def.Store.Type, ar.Root)
	if len(l.Timelines) == 0 {
		fmt.Fprintln(w, "  no WAL archived yet")
	}
	for _, t := range l.Timelines {
		fmt.Fprintf(w, "system %d, timeline %d: %s", t.SystemID, t.Timeline, plan.Plural(t.Segments, "segment"))
		if t.Segments > 0 {
			fmt.Fprintf(w, " %s … %s", t.First, t.Last)
		}
		fmt.Fprintf(w, ", %s stored", pipefile.HumanSize(t.Bytes))
		if !t.Newest.IsZero() {
			fmt.Fprintf(w, ", newest %s ago", time.Since(t.Newest).Round(time.Second))
		}
		fmt.Fprintln(w)
		for _, g := range t.Gaps {
			fmt.Fprintf(w, "  GAP %s … %s: %s missing\n", g.From, g.To, plan.Plural(int(g.Count), "segment"))
		}
		for _, what := range []struct {
			label string
			names []string
		}{{"history", t.History}, {"backups", t.Backups}, {"partial", t.Partials}} {
			if len(what.names) > 0 {
				fmt.Fprintf(w, "  %s: %s\n", what.label, strings.Join(what.names, ", "))
			}
		}
	}
	for _, d := range l.Duplicates {
		fmt.Fprintf(w, "  DAMAGED %s is archived twice with different content\n", d)
	}
	if l.Other > 0 {
		fmt.Fprintf(w, "  (%s under the archive's folder that are not archived WAL, left alone)\n", plan.Plural(l.Other, "other object"))
	}
	if rep == nil {
		for _, u := range l.Untrusted {
			fmt.Fprintf(w, "  UNTRUSTED %s: %s\n", u.Key, u.Error)
		}
		if l.SignaturesChecked && len(l.Untrusted) == 0 {
			fmt.Fprintln(w, "  every object's name is signed by a trusted key")
		}
		return
	}
	for _, b := range rep.Bad {
		fmt.Fprintf(w, "  BAD %s: %s\n", b.Key, b.Error)
	}
	for _, g := range rep.Labels {
		fmt.Fprintf(w, "  MISSING %s of the WAL backup label %s needs (%s … %s), first %s: a recovery from that backup cannot reach a consistent state\n",
			plan.Plural(int(g.Count), "segment"), g.Label, g.First, g.Last, strings.Join(g.Missing, ", "))
	}
	what := "SHA-256 of the stored bytes"
	if rep.Decoded {
		what = "decrypted, decompressed, both SHA-256"
	}
	if l.SignaturesChecked {
		what = "signed names, " + what
	}
	verdict := "all good"
	switch {
	case len(rep.Bad) > 0:
		verdict = fmt.Sprintf("%d bad", len(rep.Bad))
	case l.Gaps() > 0:
		verdict = fmt.Sprintf("%s missing", plan.Plural(int(l.Gaps()), "segment"))
	case len(rep.Labels) > 0:
		verdict = fmt.Sprintf("WAL of %s missing", plan.Plural(len(rep.Labels), "backup label"))
	case len(l.Duplicates) > 0:
		verdict = "damaged"
	}
	fmt.Fprintf(w, "verified %s, %s read (%s): %s\n", plan.Plural(rep.Objects, "object"), pipefile.HumanSize(rep.Bytes), what, verdict)
}
