package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/runner"
	"github.com/pipebackup/pipe/wal"
)

// storeFlags are the flags of the commands that read a file's stores.
type storeFlags struct {
	loadFlags
}

// openStores loads a file and opens the stores of its pipelines: those
// --pipeline names, else every pipeline that keeps runs (a backup), else
// every one that reads them (a restore). Each store's settings must be
// known: only the store's variables are needed, not the rest's.
func (a *app) openStores(ctx context.Context, path string, f *storeFlags) ([]*runner.Store, func(), error) {
	p, err := a.load(path, &f.loadFlags, "")
	if err != nil {
		return nil, nil, err
	}
	pipelines := p.Pipelines
	if len(f.pipelines) == 0 {
		pipelines = storePipelines(p)
	}
	if len(pipelines) == 0 {
		fmt.Fprintf(a.stderr, "Error: %s has no pipeline that keeps runs in a store or reads them from one (a storage sink or source: fs, s3, gcs, azure)\n", path)
		return nil, nil, &exitError{exitInvalid}
	}
	var stores []*runner.Store
	closeAll := func() {
		for _, s := range stores {
			s.Close()
		}
	}
	for _, pp := range pipelines {
		if err := knownStore(pp); err != nil {
			closeAll()
			fmt.Fprintln(a.stderr, "Error:", err)
			return nil, nil, &exitError{exitInvalid}
		}
		ss, err := runner.OpenStores(ctx, pp, a.registry)
		if err != nil {
			closeAll()
			return nil, nil, a.runError(p, err)
		}
		stores = append(stores, ss...)
	}
	return stores, closeAll, nil
}

// storePipelines are the pipelines whose stores a command reads by
// default: those that keep runs, else those that read them.
func storePipelines(p *plan.Plan) []*plan.Pipeline {
	var keep, read []*plan.Pipeline
	for _, pp := range p.Pipelines {
		switch {
		case pp.WritesManifest():
			keep = append(keep, pp)
		case pp.Source != nil && pp.Source.Schema.Storage:
			read = append(read, pp)
		}
	}
	if len(keep) > 0 {
		return keep
	}
	return read
}

// knownStore refuses a store whose settings are not all known (a variable
// without a value): a restore's source, or a backup's storing sinks.
func knownStore(p *plan.Pipeline) error {
	check := func(e *pipefile.Endpoint) error {
		var unknown []string
		for name := range e.Unknown {
			unknown = append(unknown, name)
		}
		if len(unknown) == 0 {
			return nil
		}
		sort.Strings(unknown)
		return fmt.Errorf("pipeline %q: %s %s: %s not known: give the variables they use (--var name=value or PIPE_VAR_name)", p.Name, e.Kind, e.Type, strings.Join(unknown, ", "))
	}
	stores := false
	for _, s := range p.Sinks {
		if p.WritesManifest() && s.Stores() {
			stores = true
			if err := check(s); err != nil {
				return err
			}
		}
	}
	if !stores && p.Source != nil {
		return check(p.Source)
	}
	return nil
}

// runError prints an error from configuring endpoints (with positions)
// or running, and says how the command ends.
func (a *app) runError(p *plan.Plan, err error) error {
	var de *runner.DiagError
	if errors.As(err, &de) {
		a.printDiags(p.File, de.Diags)
		return &exitError{exitFailed}
	}
	fmt.Fprintln(a.stderr, "Error:", scrub(err.Error(), p.File.Secrets()))
	return &exitError{exitFailed}
}

func (a *app) backupsCmd() *cobra.Command {
	var f storeFlags
	cmd := &cobra.Command{
		Use:   "backups FILE.hcl",
		Short: "List the runs a file's store holds: complete ones, and those that did not finish",
		Long: `backups lists the runs in the store of each pipeline of the file that keeps
runs (a backup's storage sink; or, if the file has none, a restore's storage
source), newest first: run id, pipeline, when it finished and how long it
took, streams, original and stored bytes, codec, encryption and what was
backed up; then the runs that did not finish (objects without a manifest).
--pipeline chooses the pipelines. A store keeps an index (pipe-index.json)
so a listing reads one object, not every manifest; the manifests stay the
truth. Subcommands show one run, delete runs and prune by retention.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stores, done, err := a.openStores(ctx, args[0], &f)
			if err != nil {
				return err
			}
			defer done()
			type storeJSON struct {
				Store      string              `json:"store"`
				Pipeline   string              `json:"pipeline"`
				Runs       []catalog.Entry     `json:"runs"`
				Incomplete []incompleteJSON    `json:"incomplete,omitempty"`
				Invalid    []map[string]string `json:"invalid_manifests,omitempty"`
			}
			var out []storeJSON
			failed := false
			for i, s := range stores {
				l, err := runner.ListRuns(ctx, s)
				if err != nil {
					fmt.Fprintf(a.stderr, "Error: %s: %v\n", s.Where(), err)
					failed = true
					continue
				}
				if f.json {
					sj := storeJSON{Store: s.Where(), Pipeline: s.Pipeline, Runs: l.Runs}
					if sj.Runs == nil {
						sj.Runs = []catalog.Entry{}
					}
					for _, g := range l.Incomplete {
						sj.Incomplete = append(sj.Incomplete, incomplete(g))
					}
					for _, bad := range l.Invalid {
						sj.Invalid = append(sj.Invalid, map[string]string{"manifest": bad.Key, "error": bad.Err.Error()})
					}
					out = append(out, sj)
					continue
				}
				if i > 0 {
					fmt.Fprintln(a.stdout)
				}
				printListing(a.stdout, s, l, time.Now())
			}
			if f.json {
				if err := writeJSON(a.stdout, map[string]any{"stores": out}); err != nil {
					return err
				}
			}
			if failed {
				return &exitError{exitFailed}
			}
			return nil
		},
	}
	f.register(cmd, false, true, true)
	cmd.AddCommand(a.backupsShowCmd(), a.backupsDeleteCmd(), a.backupsPruneCmd(), a.backupsPinCmd(), a.backupsUnpinCmd())
	return cmd
}

type incompleteJSON struct {
	RunID   string    `json:"run_id,omitempty"`
	Started time.Time `json:"started,omitzero"`
	Objects int       `json:"objects"`
	Bytes   int64     `json:"bytes"`
}

func incomplete(g *catalog.Incomplete) incompleteJSON {
	return incompleteJSON{RunID: g.RunID, Started: g.Started, Objects: len(g.Objects), Bytes: g.Size}
}

// printListing prints a store's runs as a table.
func printListing(w io.Writer, s *runner.Store, l *catalog.Listing, now time.Time) {
	fmt.Fprintf(w, "%s (pipeline %q): %s", s.Where(), s.Pipeline, plan.Plural(len(l.Runs), "run"))
	if n := len(l.Incomplete); n > 0 {
		fmt.Fprintf(w, ", %d that did not finish", n)
	}
	fmt.Fprintln(w)
	if len(l.Runs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "RUN\tPIPELINE\tFINISHED (UTC)\tTOOK\tSTREAMS\tORIGINAL\tSTORED\tRATIO\tCODEC\tENCRYPTION\tSOURCE")
		for _, e := range l.Runs {
			orig, ratio := "-", "-"
			if e.Original >= 0 {
				orig = pipefile.HumanSize(e.Original)
				if e.Stored > 0 {
					ratio = fmt.Sprintf("%.2f×", float64(e.Original)/float64(e.Stored))
				}
			}
			streams := strconv.Itoa(e.Streams)
			if len(e.Failed) > 0 {
				streams += fmt.Sprintf(" (%d failed)", len(e.Failed))
			}
			if e.Damage != "" {
				streams += " DAMAGED"
			}
			id := e.RunID
			if e.Pinned {
				id += " (pinned)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, e.Pipeline, e.FinishedAt.UTC().Format("2006-01-02 15:04:05"),
				took(e.FinishedAt.Sub(e.StartedAt)), streams, orig, pipefile.HumanSize(e.Stored), ratio, e.Codec, encryption(e.Summary), sourceText(e.Source, e.CopiedAt))
		}
		tw.Flush()
	}
	for _, e := range l.Runs {
		if e.Damage != "" {
			fmt.Fprintf(w, "  DAMAGED run %s: %s\n", e.RunID, e.Damage)
		}
	}
	for _, g := range l.Incomplete {
		what := "objects of no run"
		if g.RunID != "" {
			what = fmt.Sprintf("run %s, started %s ago, did not finish (or is still running)", g.RunID, took(now.Sub(g.Started)))
		}
		fmt.Fprintf(w, "  no manifest: %s: %s, %s\n", what, plan.Plural(len(g.Objects), "object"), pipefile.HumanSize(g.Size))
	}
	for _, bad := range l.Invalid {
		fmt.Fprintf(w, "  refused manifest %s: %v\n", bad.Key, bad.Err)
	}
}

func took(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Hour:
		return d.Round(time.Second).String()
	case d < 72*time.Hour:
		return d.Round(time.Minute).String()
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func encryption(s catalog.Summary) string {
	switch {
	case s.Encryption == "":
		return "none"
	case s.Passphrase:
		return "age passphrase"
	}
	return "age " + strings.Join(s.Recipients, ",")
}

// sourceText is what was backed up, from the manifest's facts.
func sourceText(facts map[string]string, copied time.Time) string {
	var parts []string
	for _, k := range []string{"type", "server_version", "database", "format"} {
		if v := facts[k]; v != "" {
			parts = append(parts, v)
		}
	}
	if r, ok, err := wal.BackupRange(facts); ok && err == nil && r.Complete() {
		first, last := r.Names()
		parts = append(parts, "WAL "+first+"…"+last)
	}
	switch {
	case facts[sdk.FactParent] != "":
		parts = append(parts, "incremental on "+facts[sdk.FactParent])
	case facts[sdk.FactBackupType] == "full" && facts[sdk.FactFullReason] != "":
		parts = append(parts, "full")
	}
	if !copied.IsZero() {
		parts = append(parts, "(copy of "+copied.UTC().Format("2006-01-02")+")")
	}
	return strings.Join(parts, " ")
}
