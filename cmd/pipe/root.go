package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/pipebackup/pipe/internal/version"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/profiles"
)

// app holds what every command shares.
type app struct {
	stdout, stderr io.Writer
	// registry is made on first use and closed (its plugins stopped) when
	// the command ends.
	registry *host.Registry
	host     profiles.Host
	// color renders diagnostics with terminal colors.
	color bool
	// log is where records go (plugins' too); redact takes the loaded
	// file's secrets out of them.
	logf   logFlags
	log    *slog.Logger
	redact *redactor
	// inprocess runs the built-in endpoints in this process (pipe wal).
	inprocess bool
	// walFile is the file pipe wal loaded, for its secrets.
	walFile *pipefile.File
}

// loadFlags are the flags of commands that read a pipeline file.
type loadFlags struct {
	vars      []string
	profile   string
	pipelines []string
	json      bool
	// running, skipDecrypt, skipSign and skipTrust are pipefile.Options'
	// Running, SkipDecrypt, SkipSign and SkipTrust.
	running, skipDecrypt, skipSign, skipTrust bool
}

func (f *loadFlags) register(cmd *cobra.Command, withProfile, withPipeline, withJSON bool) {
	cmd.Flags().StringArrayVar(&f.vars, "var", nil, "set a variable: --var name=value (repeatable; also PIPE_VAR_name)")
	if withProfile {
		cmd.Flags().StringVar(&f.profile, "profile", "", "profile to use, beating the file's: "+strings.Join(profiles.Names(), ", "))
	}
	if withPipeline {
		cmd.Flags().StringArrayVar(&f.pipelines, "pipeline", nil, "only this pipeline (repeatable); default: all, in file order")
	}
	if withJSON {
		cmd.Flags().BoolVar(&f.json, "json", false, "print JSON instead of text")
	}
}

// newRootCmd returns the CLI and a function that stops the plugin processes
// it started; callers run it after Execute, whatever the outcome.
func newRootCmd(stdout, stderr io.Writer) (*cobra.Command, func()) {
	a := &app{stdout: stdout, stderr: stderr, host: profiles.ThisHost(), color: isTerminal(stderr), redact: newRedactor()}
	a.log, _ = a.logf.newLogger(stderr, a.redact) // the defaults, until the flags are parsed
	root := &cobra.Command{
		Use:   "pipe",
		Short: "Declarative, memory-bounded backup and restore pipelines",
		Long: `pipe runs declarative backup and restore pipelines. A pipeline file (HCL)
names a source (a database dump, files, any command's output), in-process
stages (parallel compression, encryption, checksums) and sinks (a folder,
S3, Google Cloud Storage, Azure Blob Storage, a database, any command's
input); a restore pipeline brings the bytes back.

Start with pipe keygen, then pipe validate, pipe plan and pipe run on a
pipeline file. The manual is docs/README.md in pipe's source.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version.Version,
	}
	a.logf.register(root)
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		l, err := a.logf.newLogger(stderr, a.redact)
		if err != nil {
			fmt.Fprintln(stderr, "Error:", err)
			return &exitError{exitInvalid}
		}
		a.log = l
		return nil
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(a.runCmd(), a.validateCmd(), a.planCmd(), a.fmtCmd(), a.profilesCmd(), a.keygenCmd(), a.pluginsCmd(), a.benchCmd(), a.backupsCmd(), a.verifyCmd(), a.drillCmd(), a.walCmd(), a.binlogCmd())
	return root, a.closeRegistry
}

func (a *app) openRegistry() (*host.Registry, error) {
	if a.registry == nil {
		reg, err := newRegistry(a.log, a.inprocess)
		if err != nil {
			return nil, err
		}
		a.registry = reg
	}
	return a.registry, nil
}

// closeRegistry stops the plugin processes.
func (a *app) closeRegistry() {
	if a.registry != nil {
		a.registry.Close()
		a.registry = nil
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// parseVars reads --var name=value flags.
func parseVars(vars []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vars {
		name, value, ok := strings.Cut(v, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--var %q: write --var name=value", v)
		}
		out[name] = value
	}
	return out, nil
}

// load reads and plans a pipeline file, printing every diagnostic. runID
// is empty for validate and plan.
func (a *app) load(path string, f *loadFlags, runID string) (*plan.Plan, error) {
	vars, err := parseVars(f.vars)
	if err != nil {
		fmt.Fprintln(a.stderr, "Error:", err)
		return nil, &exitError{exitInvalid}
	}
	reg, err := a.openRegistry()
	if err != nil {
		return nil, err
	}
	file, diags := pipefile.Load(path, pipefile.Options{Vars: vars, RunID: runID, Now: time.Now(), Schemas: reg,
		Pipelines: f.pipelines, HideEnv: reg.HideEnv, Running: f.running, SkipDecrypt: f.skipDecrypt, SkipSign: f.skipSign, SkipTrust: f.skipTrust})
	if file != nil && len(f.pipelines) > 0 && !diags.HasErrors() {
		for _, name := range f.pipelines {
			if !slices.Contains(file.Names, name) {
				names := slices.Clone(file.Names)
				sort.Strings(names)
				fmt.Fprintf(a.stderr, "Error: --pipeline %s: %s has no such pipeline (it has %s)\n", name, path, strings.Join(names, ", "))
				return nil, &exitError{exitInvalid}
			}
		}
	}
	// The planner runs on what loaded, errors or not: an attribute with a
	// mistake does not hide another attribute's (every error at once).
	var p *plan.Plan
	if file != nil {
		var d hcl.Diagnostics
		p, d = plan.New(file, plan.Options{Profile: f.profile, Host: a.host, Memory: reg.Memory, SmallObjectMemory: reg.SmallObjectMemory})
		diags = append(diags, d...)
	}
	if len(diags) > 0 {
		a.printDiags(file, diags)
	}
	if diags.HasErrors() {
		return nil, &exitError{exitInvalid}
	}
	a.redact.learn(p)
	// Keep the order --pipeline gave.
	if len(f.pipelines) > 0 {
		var keep []*plan.Pipeline
		for _, name := range f.pipelines {
			for _, pp := range p.Pipelines {
				if pp.Name == name {
					keep = append(keep, pp)
				}
			}
		}
		p.Pipelines = keep
	}
	return p, nil
}

// printDiags renders diagnostics with snippets, scrubbing every secret the
// file holds (an inline passphrase would otherwise show in its snippet).
func (a *app) printDiags(f *pipefile.File, diags hcl.Diagnostics) {
	var files map[string]*hcl.File
	var secrets []string
	if f != nil {
		files, secrets = f.Files(), f.Secrets()
	}
	var buf bytes.Buffer
	_ = pipefile.WriteDiagnostics(&buf, files, diags, a.color)
	_, _ = io.WriteString(a.stderr, scrub(buf.String(), secrets))
}

// newRunID returns a sortable run id: UTC time and 6 random hex digits.
func newRunID(now time.Time) string {
	var b [3]byte
	rand.Read(b[:])
	return now.UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
}
