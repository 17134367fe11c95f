package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
)

func (a *app) validateCmd() *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "validate FILE.hcl",
		Short: "Check a pipeline file without moving a byte",
		Long: `validate loads a pipeline file, decodes every block against its schema and
resolves its profile, reporting every problem of the file at once with
file:line:column and a snippet. It starts no program and connects to
nothing: pipe run checks the programs and connections before any byte
moves. Exit code 0: valid; 2: invalid.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.load(args[0], &f, "")
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s: valid (%d pipeline(s))\n", args[0], len(p.Pipelines))
			return nil
		},
	}
	f.register(cmd, true, false, false)
	return cmd
}

func (a *app) planCmd() *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "plan FILE.hcl",
		Short: "Print the resolved pipelines: stages, workers, buffers and the memory budget",
		Long: `plan prints each pipeline as pipe run would run it: the profile and where
each number came from, each stage with its codec, level, workers and frame
size, where each object and the manifest go, the buffers of each position
and the memory budget, which does not grow with the input.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.load(args[0], &f, "")
			if err != nil {
				return err
			}
			previews := a.retentionPreviews(cmd, p)
			if f.json {
				return writeJSON(a.stdout, struct {
					plan.JSON
					Retention []retentionPreview `json:"retention_after_next_run,omitempty"`
				}{p.JSON(), previews})
			}
			p.Print(a.stdout)
			for _, r := range previews {
				switch {
				case r.Error != "":
					fmt.Fprintf(a.stdout, "\nretention of pipeline %q (%s): cannot read the store: %s\n", r.Pipeline, r.Store, r.Error)
				case len(r.Delete)+r.Leftovers == 0:
					fmt.Fprintf(a.stdout, "\nretention of pipeline %q (%s): the next successful run deletes nothing (%s now)\n", r.Pipeline, r.Store, plan.Plural(r.Runs, "run"))
				default:
					fmt.Fprintf(a.stdout, "\nretention of pipeline %q (%s): the next successful run deletes %s (%s) and %s of runs that did not finish\n",
						r.Pipeline, r.Store, plan.Plural(len(r.Delete), "run"), strings.Join(r.Delete, ", "), plan.Plural(r.Leftovers, "leftover object"))
				}
			}
			return nil
		},
	}
	f.register(cmd, true, true, true)
	return cmd
}

// retentionPreview is what retention would delete after a pipeline's next
// successful run.
type retentionPreview struct {
	Pipeline  string   `json:"pipeline"`
	Store     string   `json:"store"`
	Runs      int      `json:"runs"`
	Delete    []string `json:"delete_runs"`
	Leftovers int      `json:"delete_leftover_objects"`
	Error     string   `json:"error,omitempty"`
}

// retentionPreviews reads the stores of the pipelines with retention and
// says what their next successful run would delete. A store that cannot be
// read is said, not an error: plan stays a plan.
func (a *app) retentionPreviews(cmd *cobra.Command, p *plan.Plan) []retentionPreview {
	var out []retentionPreview
	for _, pp := range p.Pipelines {
		withRetention := false
		for _, s := range pp.Sinks {
			withRetention = withRetention || s.Retention.Set()
		}
		if !withRetention || !pp.WritesManifest() || knownStore(pp) != nil {
			continue
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
		stores, err := runner.OpenStores(ctx, pp, a.registry)
		if err != nil {
			out = append(out, retentionPreview{Pipeline: pp.Name, Error: err.Error()})
			cancel()
			continue
		}
		for _, s := range stores {
			if !s.Def.Retention.Set() {
				continue
			}
			r := retentionPreview{Pipeline: pp.Name, Store: s.Where(), Delete: []string{}}
			rp, err := runner.RetentionAfterNext(ctx, s, time.Now())
			if err != nil {
				r.Error = err.Error()
			} else {
				r.Runs = len(rp.Keep) + len(rp.Drop)
				r.Delete = runIDs(rp.Drop)
				r.Leftovers = len(rp.Garbage)
			}
			out = append(out, r)
			s.Close()
		}
		cancel()
	}
	return out
}

func (a *app) fmtCmd() *cobra.Command {
	var check bool
	cmd := &cobra.Command{
		Use:   "fmt FILE.hcl...",
		Short: "Rewrite pipeline files in canonical HCL formatting",
		Long:  "fmt rewrites each file in canonical layout. With --check it changes nothing and exits 1 if a file needs formatting.",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			code := exitOK
			for _, path := range args {
				src, err := os.ReadFile(path)
				if err != nil {
					fmt.Fprintln(a.stderr, "Error:", err)
					code = exitInvalid
					continue
				}
				parser, diags := pipefile.ParseSyntax(path, src)
				if diags.HasErrors() {
					_ = pipefile.WriteDiagnostics(a.stderr, parser.Files(), diags, a.color)
					code = exitInvalid
					continue
				}
				out := hclwrite.Format(src)
				if bytes.Equal(out, src) {
					continue
				}
				if check {
					fmt.Fprintln(a.stdout, path)
					code = max(code, exitFailed)
					continue
				}
				fi, _ := os.Stat(path)
				if err := os.WriteFile(path, out, fi.Mode().Perm()); err != nil {
					fmt.Fprintln(a.stderr, "Error:", err)
					code = exitInvalid
					continue
				}
				fmt.Fprintln(a.stdout, path)
			}
			if code != exitOK {
				return &exitError{code}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&check, "check", false, "list files that need formatting, change nothing")
	return cmd
}

func (a *app) profilesCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "profiles",
		Short: "Print the profiles and the numbers each sets on this machine",
		Long: `profiles prints the presets (conservative, balanced, performance,
max-performance, turbo) with the chunk size, workers, streams, queue depth,
compression levels and object-store part size and concurrency each sets on
this machine, and what auto makes of them. A pipeline's profile attribute
chooses one, --profile beats the file, and explicit settings beat both.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			all := profiles.All(a.host)
			unknown, one, many := profiles.AutoFor(a.host, 0), profiles.AutoFor(a.host, 1), profiles.AutoFor(a.host, 8)
			if asJSON {
				return writeJSON(a.stdout, map[string]any{"cpus": a.host.CPUs, "memory_bytes": a.host.Memory, "auto": one.Base, "auto_rule": profiles.AutoRule,
					"auto_streams_not_known": unknown, "auto_one_stream": one, "auto_8_streams": many, "profiles": all})
			}
			fmt.Fprintf(a.stdout, "This machine: %d CPUs, %s of memory. auto starts from %s.\n\n", a.host.CPUs, pipefile.HumanSize(a.host.Memory), one.Base)
			fmt.Fprintf(a.stdout, "%-16s %9s %8s %8s %6s  %-21s %9s %5s\n", "PROFILE", "CHUNK", "WORKERS", "STREAMS", "DEPTH", "LEVELS", "PART", "CONC")
			unknown.Name, one.Name, many.Name = "auto", "auto, 1 stream", "auto, 8 streams"
			all = append(all, unknown, one, many)
			for _, p := range all {
				mark := ""
				if p.Name == one.Base {
					mark = " ← auto starts here"
				}
				fmt.Fprintf(a.stdout, "%-16s %9s %8d %8d %6d  %-21s %9s %5d%s\n", p.Name, pipefile.HumanSize(p.ChunkSize), p.Workers, p.Streams, p.Depth,
					fmt.Sprintf("zstd %d gzip %d lz4 %d", p.Levels["zstd"], p.Levels["gzip"], p.Levels["lz4"]), pipefile.HumanSize(p.PartSize), p.Concurrency, mark)
			}
			fmt.Fprintln(a.stdout, "\nPART and CONC: part (block) size and parts in flight per object for object stores.")
			fmt.Fprintln(a.stdout)
			for _, p := range all[:len(all)-3] {
				fmt.Fprintf(a.stdout, "%-16s %s\n", p.Name, p.Description)
			}
			fmt.Fprintf(a.stdout, "%-16s %s.\n", "auto", profiles.AutoRule)
			fmt.Fprintf(a.stdout, "%-16s the streams are the file's streams, else an endpoint's jobs, else not known (the first auto row); pipe plan shows what auto chose for each pipeline.\n", "")
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func writeJSON(w interface{ Write([]byte) (int, error) }, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
