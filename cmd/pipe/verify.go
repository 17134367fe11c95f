package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/runner"
	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// verifyFlags are pipe verify's flags.
type verifyFlags struct {
	store         storeFlags
	metrics       metricsFlags
	runID, sample string
	last          int
	all, decrypt  bool
	locks         bool
}

func (a *app) verifyCmd() *cobra.Command {
	var f verifyFlags
	cmd := &cobra.Command{
		Use:   "verify FILE.hcl",
		Short: "Check stored runs without restoring: every object's size and SHA-256, and with --decrypt its encryption and compression",
		Long: `verify reads the stored bytes of runs in a file's store and checks each
object's size and SHA-256 against its run's manifest. It needs read access
to the store and no key: it can run where the private key never goes.
--decrypt also decrypts and decodes every object to nowhere with the
file's restore pipeline (the one with a decrypt stage), which checks age's
authentication of every 64 KiB and zstd's frame checksums. Every bad
object is named (missing, truncated, changed); the exit code is 0 when all
are good and 1 otherwise. By default the newest run; --run, --last N or
--all choose others, --sample P% reads a random part of each run. The
metrics flags export pipe_verify_* as pipe run exports its own.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.verify(cmd, args[0], &f)
		},
	}
	f.store.register(cmd, false, true, true)
	f.metrics.register(cmd)
	cmd.Flags().StringVar(&f.runID, "run", "", "verify this run (its id, as pipe backups lists it)")
	cmd.Flags().IntVar(&f.last, "last", 0, "verify the newest N runs")
	cmd.Flags().BoolVar(&f.all, "all", false, "verify every run")
	cmd.Flags().StringVar(&f.sample, "sample", "", "read this share of each run's objects, chosen at random (e.g. 10%)")
	cmd.Flags().BoolVar(&f.decrypt, "decrypt", false, "also decrypt and decode every object to nowhere, with the file's restore pipeline's keys")
	cmd.Flags().BoolVar(&f.locks, "locks", false, "instead of reading the objects, prove each one (the manifest too) is locked by the store, at least as long as keep_within keeps the run")
	return cmd
}

// samplePercent checks that one of --run, --last and --all is given at
// most, and returns the percentage --sample gives (0 without); a mistake
// is said on stderr, and exits with code 2.
func (a *app) samplePercent(f *verifyFlags) (float64, error) {
	n := 0
	if f.runID != "" {
		n++
	}
	if f.last > 0 {
		n++
	}
	if f.all {
		n++
	}
	if n > 1 {
		fmt.Fprintln(a.stderr, "Error: give one of --run, --last and --all")
		return 0, &exitError{exitInvalid}
	}
	if f.sample == "" {
		return 0, nil
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(f.sample, "%"), 64)
	if err != nil || v <= 0 || v > 100 {
		fmt.Fprintf(a.stderr, "Error: --sample %q: give a percentage above 0 and at most 100, e.g. 10%%\n", f.sample)
		return 0, &exitError{exitInvalid}
	}
	return v, nil
}

// verify is pipe verify: it checks the runs the flags choose in the
// file's one store, and reports them.
func (a *app) verify(cmd *cobra.Command, path string, f *verifyFlags) error {
	sample, err := a.samplePercent(f)
	if err != nil {
		return err
	}
	ctx, stop := interruptible(cmd)
	defer stop()
	s, done, err := a.oneStore(ctx, path, &f.store)
	if err != nil {
		return err
	}
	defer done()
	p, err := a.load(path, &loadFlags{vars: f.store.vars, profile: f.store.profile}, "")
	if err != nil {
		return err
	}
	o := runner.VerifyOptions{RunID: f.runID, Last: f.last, All: f.all, Sample: sample, Plan: pipelineNamed(p, s.Pipeline)}
	o.Trust, o.Who, err = verifyTrust(o.Plan, s.Kind)
	if err != nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return &exitError{exitInvalid}
	}
	if f.locks {
		return a.verifyLocks(ctx, f, s, o)
	}
	if f.decrypt {
		dp, err := decoder(p, s.Pipeline)
		if err != nil {
			fmt.Fprintln(a.stderr, "Error:", err)
			return &exitError{exitInvalid}
		}
		o.Decode = dp
	}
	if pa := p.WALArchive(pipelineNamed(p, s.Pipeline)); pa != nil {
		o.WALWhere = fmt.Sprintf("archive %q", pa.Name)
		o.WAL = runner.ArchiveListing(pa, a.registry)
	}
	mx, err := a.startMetrics(&f.metrics, path)
	if err != nil {
		return err
	}
	defer mx.close()
	rep, err := runner.Verify(ctx, s, o)
	mx.verified(s.Pipeline, rep, err)
	a.notifyVerified(p.File, s.Pipeline, rep, err)
	return a.verifyEnded(ctx, f, p.File.Secrets(), rep, err)
}

// verifyEnded reports what verify found (as JSON with --json) and
// returns the exit code's error.
func (a *app) verifyEnded(ctx context.Context, f *verifyFlags, secrets []string, rep *runner.VerifyReport, err error) error {
	if f.store.json {
		out := map[string]any{"ok": err == nil && rep.OK(), "report": rep}
		if err != nil {
			out["error"] = scrub(err.Error(), secrets)
		}
		if jerr := writeJSON(a.stdout, out); jerr != nil {
			return jerr
		}
	} else {
		printVerify(a, rep)
	}
	switch {
	case ctx.Err() != nil:
		return &exitError{exitInterrupted}
	case err != nil:
		if !f.store.json {
			fmt.Fprintln(a.stderr, "Error:", scrub(err.Error(), secrets))
		}
		return &exitError{exitFailed}
	case !rep.OK():
		return &exitError{exitFailed}
	}
	return nil
}

// verifyTrust is the keys verify checks the runs' signatures with, for
// the store of kind ("sink" or "source") of pipeline p: a store the
// pipeline writes, with its sign block, is checked with its own key (what
// it wrote, it signed); any other (what a pipeline reads, or a copy's
// store without sign, whose runs keep their writers' signatures) with its
// trust block; without either, nothing is checked. A block whose keys are
// known only at run time (a variable without a value, env() of an unset
// variable) is an error: verify would otherwise skip the check without a
// word.
func verifyTrust(p *plan.Pipeline, kind string) (signing.Trust, string, error) {
	unknown := func(block string) error {
		return fmt.Errorf("pipeline %q: the keys of its %s block are not known here (a variable without a value, or env() of an unset variable): give them, so that verify can check the runs' signatures", p.Name, block)
	}
	switch {
	case kind == "sink" && p.Def.Sign != nil && p.Sign == nil:
		return nil, "", unknown("sign")
	case kind == "sink" && p.Sign != nil:
		return signing.Trust{p.Sign.Public()}, fmt.Sprintf("pipeline %q (which signs its runs with it)", p.Name), nil
	case p.Def.Trust != nil && p.Trust == nil:
		return nil, "", unknown("trust")
	case p.Trust != nil:
		return p.Trust, fmt.Sprintf("pipeline %q", p.Name), nil
	}
	return nil, "", nil
}

// pipelineNamed returns the pipeline called name.
func pipelineNamed(p *plan.Plan, name string) *plan.Pipeline {
	for _, pp := range p.Pipelines {
		if pp.Name == name {
			return pp
		}
	}
	return p.Pipelines[0]
}

// decoder is the file's restore pipeline whose stages --decrypt decodes
// with: the one with a decrypt stage (or, for backups without encryption,
// a decompress stage), the store's own pipeline first. A file that only
// backs up has none: it holds the recipients, never the private key, and
// the error says to give the file that restores.
func decoder(p *plan.Plan, store string) (*plan.Pipeline, error) {
	var withDecrypt, withDecompress []*plan.Pipeline
	for _, pp := range p.Pipelines {
		switch {
		case pp.Stage(stagekind.Decrypt.Name) != nil:
			withDecrypt = append(withDecrypt, pp)
		case pp.Stage(stagekind.Decompress.Name) != nil:
			withDecompress = append(withDecompress, pp)
		}
	}
	for _, pps := range [][]*plan.Pipeline{withDecrypt, withDecompress} {
		for _, pp := range pps {
			if pp.Name == store {
				return pp, nil
			}
		}
		if len(pps) > 0 {
			return pps[0], nil
		}
	}
	return nil, fmt.Errorf("--decrypt decodes with a pipeline that restores (decrypt { identities = [file(\"keys/backup.key\")] }, decompress {}), and %[1]s has none: it only backs up, and holds no private key. "+
		"Give the file that restores these backups, whose decrypt block holds the key: pipe verify RESTORE.hcl --decrypt; or add such a pipeline to %[1]s. Without --decrypt, verify checks sizes and SHA-256 with no key", p.File.Path)
}

func printVerify(a *app, rep *runner.VerifyReport) {
	if rep == nil {
		return
	}
	for _, r := range rep.Runs {
		status := "ok"
		if r.Bad > 0 {
			status = fmt.Sprintf("%d BAD", r.Bad)
		}
		signed := ""
		if r.SignedBy != "" {
			signed = ", signed by " + r.SignedBy
		}
		needed := ""
		if r.NeededBy != "" {
			needed = ", needed by run " + r.NeededBy
		}
		fmt.Fprintf(a.stdout, "run %s (pipeline %q): %s checked, %s%s%s\n", r.RunID, r.Pipeline, plan.Plural(len(r.Objects), "object"), status, signed, needed)
		if r.Chain != "" {
			fmt.Fprintf(a.stdout, "  BAD chain: %s\n", r.Chain)
		}
		if r.Error != "" {
			fmt.Fprintf(a.stdout, "  %s\n", r.Error)
			continue
		}
		for _, o := range r.Objects {
			if !o.OK {
				fmt.Fprintf(a.stdout, "  BAD %s: %s\n", o.Key, o.Error)
			}
		}
		switch w := r.WAL; {
		case w == nil:
		case w.Error != "":
			fmt.Fprintf(a.stdout, "  BAD WAL: %s\n", w.Error)
		case !w.Checked:
			fmt.Fprintf(a.stdout, "  WAL %s … %s not checked: the file has no archive block (or several: set the pipeline's wal_archive)\n", w.First, w.Last)
		default:
			fmt.Fprintf(a.stdout, "  WAL %s … %s: all archived\n", w.First, w.Last)
		}
		if r.Damage != "" {
			fmt.Fprintf(a.stdout, "  BAD DAMAGED: the source found what it read damaged when it was backed up: %s\n", r.Damage)
		}
		if w := r.WAL; w != nil {
			for _, g := range w.GapsAfter {
				fmt.Fprintf(a.stdout, "  BAD WAL after the backup: %s … %s of timeline %d missing (%s): recovery to the end of the archive would stop at %s as if the archive ended there; a recovery target before it is not affected\n",
					g.From, g.To, g.Timeline, plan.Plural(int(g.Count), "segment"), g.From)
			}
		}
	}
	what := "sizes and SHA-256"
	if rep.Signatures {
		what = "signatures, " + what
	}
	if rep.Decoded {
		what += ", decrypted and decoded"
	}
	verdict := "all good"
	if !rep.OK() {
		verdict = fmt.Sprintf("%d bad", rep.Bad)
	}
	fmt.Fprintf(a.stdout, "%s: %s of %s, %s read (%s): %s\n", rep.Store, plan.Plural(rep.Objects, "object"), plan.Plural(len(rep.Runs), "run"),
		pipefile.HumanSize(rep.Bytes), what, verdict)
}

// verifyLocks is pipe verify --locks: how the store locks each object of
// the runs chosen.
func (a *app) verifyLocks(ctx context.Context, f *verifyFlags, s *runner.Store, o runner.VerifyOptions) error {
	rep, err := runner.VerifyLocks(ctx, s, o)
	if f.store.json {
		out := map[string]any{"locks": rep}
		if err != nil {
			out["error"] = err.Error()
		}
		if jerr := writeJSON(a.stdout, out); jerr != nil {
			return jerr
		}
	} else {
		for _, r := range rep.Runs {
			fmt.Fprintln(a.stdout, r)
		}
		if err != nil {
			fmt.Fprintln(a.stderr, "Error:", err)
		} else {
			fmt.Fprintf(a.stdout, "%s: %d of %s protected by the store's lock\n", rep.Store, len(rep.Runs)-rep.Bad, plan.Plural(len(rep.Runs), "run"))
		}
	}
	if err != nil || !rep.OK() {
		return &exitError{exitFailed}
	}
	return nil
}
