package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/runner"
)

// oneStore opens the file's stores and insists on one: the command acts
// on it (--pipeline chooses when the file has several).
func (a *app) oneStore(ctx context.Context, path string, f *storeFlags) (*runner.Store, func(), error) {
	stores, done, err := a.openStores(ctx, path, f)
	if err != nil {
		return nil, nil, err
	}
	if len(stores) > 1 {
		done()
		fmt.Fprintf(a.stderr, "Error: %s names %d stores (", path, len(stores))
		for i, s := range stores {
			if i > 0 {
				fmt.Fprint(a.stderr, "; ")
			}
			fmt.Fprintf(a.stderr, "pipeline %q: %s", s.Pipeline, s.Where())
		}
		fmt.Fprintln(a.stderr, "): choose one with --pipeline")
		return nil, nil, &exitError{exitInvalid}
	}
	return stores[0], done, nil
}

func interruptible(cmd *cobra.Command) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
}

func (a *app) backupsShowCmd() *cobra.Command {
	var f storeFlags
	cmd := &cobra.Command{
		Use:   "show FILE.hcl RUN",
		Short: "Show one run in full: every object with its key, sizes, SHA-256 and codec",
		Long: `show reads a run's manifest (the truth, not the index) and prints the run
(pipeline, times, what was backed up, encryption) and every object: stream,
key, original and stored size, SHA-256, codec.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			s, done, err := a.oneStore(ctx, args[0], &f)
			if err != nil {
				return err
			}
			defer done()
			r, _, err := runner.ReadRun(ctx, s, args[1])
			if err != nil {
				fmt.Fprintln(a.stderr, "Error:", err)
				return &exitError{exitFailed}
			}
			if f.json {
				return writeJSON(a.stdout, map[string]any{"store": s.Where(), "manifest": r.Key, "run": r.Manifest, "objects": runner.Objects(r)})
			}
			printRun(a.stdout, s, r)
			return nil
		},
	}
	f.register(cmd, false, true, true)
	return cmd
}

func printRun(w interface{ Write([]byte) (int, error) }, s *runner.Store, r *catalog.Run) {
	m := r.Manifest
	sum := catalog.Summarize(m)
	fmt.Fprintf(w, "run %s of pipeline %q\n", m.RunID, m.Pipeline)
	fmt.Fprintf(w, "  store       %s, manifest %s\n", s.Where(), r.Key)
	fmt.Fprintf(w, "  started     %s\n  finished    %s (took %s)\n", catalog.TimeText(m.StartedAt), catalog.TimeText(m.FinishedAt), took(m.FinishedAt.Sub(m.StartedAt)))
	if !m.CopiedAt.IsZero() {
		fmt.Fprintf(w, "  copied      %s\n", catalog.TimeText(m.CopiedAt))
	}
	fmt.Fprintf(w, "  encryption  %s\n", encryption(sum))
	if m.RunKey != nil {
		fmt.Fprintf(w, "  run key     %s (%s, %s)\n", manifest.Resolve(r.Key, m.RunKey.Key), pipefile.HumanSize(m.RunKey.Size), m.RunKey.Digest)
	}
	for _, k := range slices.Sorted(maps.Keys(m.Source)) {
		fmt.Fprintf(w, "  source      %s = %s\n", k, m.Source[k])
	}
	if m.PipeVersion != "" {
		fmt.Fprintf(w, "  written by  pipe %s\n", m.PipeVersion)
	}
	if d := m.Dedup; d != nil {
		fmt.Fprintf(w, "  objects     %s (chunk lists), %s stored with the chunks the run added\n", plan.Plural(len(m.Objects), "object"), pipefile.HumanSize(sum.Stored))
		fmt.Fprintf(w, "  dedup       %s (%s), %d new (%s, %s stored), the rest in the store already; chunks %s, %s, key check %s\n",
			plan.Plural(int(d.Chunks), "chunk"), pipefile.HumanSize(d.Bytes), d.NewChunks, pipefile.HumanSize(d.NewBytes), pipefile.HumanSize(d.StoredBytes), d.Chunker, d.Codec, d.KeyCheck)
	} else {
		fmt.Fprintf(w, "  objects     %s, %s stored\n", plan.Plural(len(m.Objects), "object"), pipefile.HumanSize(sum.Stored))
	}
	for _, f := range m.Failed {
		fmt.Fprintf(w, "  failed      %s: %s\n", f.Stream, f.Error)
	}
	if m.Damage != "" {
		fmt.Fprintf(w, "  DAMAGED     %s\n", m.Damage)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STREAM\tKEY\tORIGINAL\tSTORED\tCODEC\tSHA-256")
	for _, o := range runner.Objects(r) {
		orig := "-"
		if o.OriginalSize >= 0 {
			orig = pipefile.HumanSize(o.OriginalSize)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", o.Stream, o.At, orig, pipefile.HumanSize(o.Size), o.Codec, o.Digest)
	}
	tw.Flush()
}

func (a *app) backupsDeleteCmd() *cobra.Command {
	var f storeFlags
	var force, dryRun, chain bool
	cmd := &cobra.Command{
		Use:   "delete FILE.hcl RUN...",
		Short: "Delete runs: each one's manifest first, then its objects",
		Long: `delete deletes runs by id from the store of a pipeline that keeps runs: each
run's manifest first (a half-deleted run never looks restorable), then its
objects that no other run names, and keeps the store's index current. A
run that did not finish (objects without a manifest) is deleted only once
it is 24 hours old: a younger one may still be writing. delete refuses a
pinned run (pipe backups pin), and the last complete base backup of a
PostgreSQL cluster in the store, since the WAL archived for it can then
recover nothing, unless --force. It refuses a run that incremental runs
build on (they would no longer restore) unless --chain, which deletes them
with it. --dry-run says what it would delete, and that, and deletes
nothing.`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := interruptible(cmd)
			defer stop()
			s, done, err := a.oneStore(ctx, args[0], &f)
			if err != nil {
				return err
			}
			defer done()
			o := runner.DeleteOptions{Now: time.Now(), Force: force, DryRun: dryRun, Chain: chain}
			if p, lerr := a.load(args[0], &loadFlags{vars: f.vars, profile: f.profile}, ""); lerr == nil {
				if pa := p.WALArchive(pipelineNamed(p, s.Pipeline)); pa != nil {
					o.Archive = pa.Name
				}
			}
			d, err := runner.DeleteRuns(ctx, s, args[1:], o)
			verb := "deleted"
			if dryRun {
				verb = "would delete"
			}
			if f.json {
				out := map[string]any{"store": s.Where(), "dry_run": dryRun, "deleted": d}
				if err != nil {
					out["error"] = err.Error()
				}
				if jerr := writeJSON(a.stdout, out); jerr != nil {
					return jerr
				}
			} else if d != nil && err == nil {
				for _, id := range d.Runs {
					fmt.Fprintf(a.stdout, "%s run %s\n", verb, id)
				}
				if d.Objects > 0 {
					fmt.Fprintf(a.stdout, "%s %s of runs that did not finish\n", verb, plan.Plural(d.Objects, "object"))
				}
				for _, l := range d.Last {
					if dryRun {
						fmt.Fprintf(a.stderr, "Warning: %s; --force would delete it\n", l.Warning(o.Archive))
					} else {
						fmt.Fprintf(a.stderr, "Warning: %s; deleted, as --force asked\n", l.Warning(o.Archive))
					}
				}
			}
			if err != nil {
				if !f.json {
					fmt.Fprintln(a.stderr, "Error:", err)
				}
				return &exitError{exitFailed}
			}
			return nil
		},
	}
	f.register(cmd, false, true, true)
	cmd.Flags().BoolVar(&force, "force", false, "delete pinned runs and a cluster's last complete base backup too")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "say what would be deleted; delete nothing")
	cmd.Flags().BoolVar(&chain, "chain", false, "delete with each run the incremental runs that build on it")
	return cmd
}

func (a *app) backupsPruneCmd() *cobra.Command {
	var f storeFlags
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune FILE.hcl",
		Short: "Apply the sink's retention rules now, and remove runs that did not finish",
		Long: `prune applies the retention of a pipeline's sink (keep_last, keep_within,
keep_daily, keep_weekly, keep_monthly, keep_yearly) now, as a run does after
it succeeds: the pipeline's runs that no rule keeps, and that are not
pinned, are deleted, manifest first; objects of runs that did not finish go once they
are 24 hours old. For base backups, the WAL archive loses every file
archived before the first segment of the oldest base backup kept (history
files stay), as pgBackRest's expire does: no kept backup can replay it,
whether or not a backup is deleted now (the WAL archived before a
cluster's first base backup goes too). A cluster's last complete base
backup stays whatever the rules say. prune says which rules keep each run
it keeps; --dry-run lists exactly what it would delete and deletes nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.prune(cmd, args[0], &f, dryRun)
		},
	}
	f.register(cmd, false, true, true)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "list what would be deleted; delete nothing")
	return cmd
}

// prune is pipe backups prune: retention now in the file's one store
// and, when its sink has rules, in the pipeline's WAL archive.
func (a *app) prune(cmd *cobra.Command, path string, f *storeFlags, dryRun bool) error {
	ctx, stop := interruptible(cmd)
	defer stop()
	s, done, err := a.oneStore(ctx, path, f)
	if err != nil {
		return err
	}
	defer done()
	rp, d, err := runner.PruneStore(ctx, s, time.Now(), dryRun)
	if err != nil && rp == nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return &exitError{exitFailed}
	}
	var walPrune *runner.WALPrune
	if err == nil && s.Def != nil && s.Def.Retention.Set() {
		p, lerr := a.load(path, &loadFlags{vars: f.vars, profile: f.profile}, "")
		if lerr != nil {
			return lerr
		}
		if pa := p.WALArchive(pipelineNamed(p, s.Pipeline)); pa != nil {
			walPrune, err = runner.PruneWAL(ctx, pa, a.registry, rp.Standing(), len(rp.Drop), dryRun)
		}
	}
	if f.json {
		out := map[string]any{"store": s.Where(), "dry_run": dryRun, "keep": runIDs(rp.Keep), "kept_by": keptBy(rp), "delete": runIDs(rp.Drop), "delete_leftovers": leftoverKeys(rp)}
		if len(rp.Held) > 0 {
			out["kept_last_base_backups"] = runIDs(rp.Held)
		}
		if len(rp.Locked) > 0 {
			out["locked"] = rp.Locked
		}
		if d != nil {
			out["deleted"] = d
		}
		if walPrune != nil {
			out["wal"] = walPrune
		}
		if err != nil {
			out["error"] = err.Error()
		}
		if jerr := writeJSON(a.stdout, out); jerr != nil {
			return jerr
		}
	} else {
		a.printPrune(s, rp, walPrune, dryRun)
	}
	if err != nil {
		if !f.json {
			fmt.Fprintln(a.stderr, "Error:", err)
		}
		return &exitError{exitFailed}
	}
	return nil
}

// printPrune prints what prune kept and deleted (or would delete).
func (a *app) printPrune(s *runner.Store, rp *runner.RetentionPlan, walPrune *runner.WALPrune, dryRun bool) {
	verb := "deleted"
	if dryRun {
		verb = "would delete"
	}
	fmt.Fprintf(a.stdout, "%s (pipeline %q): keep %s\n", s.Where(), s.Pipeline, plan.Plural(len(rp.Keep), "run"))
	held := map[string]bool{}
	for _, r := range rp.Held {
		held[r.Key] = true
		fmt.Fprintf(a.stdout, "keep run %s (finished %s), which the rules alone would delete: the last complete base backup of its cluster in the store, which retention never deletes (pipe backups delete --force does)\n",
			r.Manifest.RunID, catalog.TimeText(r.Manifest.FinishedAt))
	}
	for _, r := range rp.Keep {
		if !held[r.Key] {
			fmt.Fprintf(a.stdout, "keep run %s (finished %s): %s\n", r.Manifest.RunID, catalog.TimeText(r.Manifest.FinishedAt), strings.Join(rp.Why[r.Key], ", "))
		}
	}
	for _, r := range rp.Drop {
		fmt.Fprintf(a.stdout, "%s run %s (finished %s)\n", verb, r.Manifest.RunID, catalog.TimeText(r.Manifest.FinishedAt))
	}
	for _, o := range rp.Garbage {
		fmt.Fprintf(a.stdout, "%s leftover %s\n", verb, o.Key)
	}
	for _, l := range rp.Locked {
		fmt.Fprintf(a.stdout, "wait: %s: the store locks it; a prune after that deletes it\n", l)
	}
	if pp := rp.Packs; pp != nil {
		switch {
		case pp.Held != "":
			fmt.Fprintf(a.stdout, "keep the packs of chunks no run names: %s\n", pp.Held)
		case len(pp.Delete) > 0:
			fmt.Fprintf(a.stdout, "%s %s of chunks no run names (%s)\n", verb, plan.Plural(len(pp.Delete), "pack"), pipefile.HumanSize(pp.Bytes))
		}
		if pp.Young > 0 {
			fmt.Fprintf(a.stdout, "keep %s no run names yet, younger than the grace period\n", plan.Plural(pp.Young, "pack"))
		}
	}
	if w := walPrune; w != nil && len(w.Kept) > 0 {
		if w.Removed > 0 {
			fmt.Fprintf(a.stdout, "%s %s\n", verb, w.Describe(dryRun))
		} else {
			fmt.Fprintln(a.stdout, w.Describe(dryRun))
		}
	}
	if len(rp.Drop)+len(rp.Garbage) == 0 && (walPrune == nil || walPrune.Removed == 0) && (rp.Packs == nil || rp.Packs.Held != "" || len(rp.Packs.Delete) == 0) {
		fmt.Fprintln(a.stdout, "nothing to delete")
	}
}

func runIDs(rs []*catalog.Run) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.Manifest.RunID)
	}
	return out
}

// keptBy says, by run id, which rules keep each run kept.
func keptBy(rp *runner.RetentionPlan) map[string][]string {
	out := map[string][]string{}
	for _, r := range rp.Keep {
		out[r.Manifest.RunID] = rp.Why[r.Key]
	}
	return out
}

func leftoverKeys(rp *runner.RetentionPlan) []string {
	out := []string{}
	for _, o := range rp.Garbage {
		out = append(out, o.Key)
	}
	return out
}
