package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/plugin"
)

// serveEnv marks the process pipe starts to serve its own endpoints.
const serveEnv = "PIPE_PLUGIN_SERVE"

// maybeServePlugins turns this process into the built-in plugin when pipe
// started it as one; it does not return then.
func maybeServePlugins() {
	if os.Getenv(serveEnv) == "builtin" {
		plugin.Serve(all.Builtin())
		os.Exit(0)
	}
}

// pluginDirs is the plugin path: PIPE_PLUGIN_PATH (colon-separated), the
// project's ./.pipe/plugins, then the user's data folder.
func pluginDirs() []string {
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("PIPE_PLUGIN_PATH")) {
		if d != "" {
			dirs = append(dirs, d)
		}
	}
	dirs = append(dirs, filepath.Join(".pipe", "plugins"))
	if data := os.Getenv("XDG_DATA_HOME"); data != "" {
		dirs = append(dirs, filepath.Join(data, "pipe", "plugins"))
	} else if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, ".local", "share", "pipe", "plugins"))
	}
	return dirs
}

// newRegistry makes the registry of endpoint types. The built-ins run in a
// plugin process that is pipe itself, like any third-party plugin;
// inprocess or PIPE_BUILTINS=inprocess runs them in this process instead
// (pipe wal, to start fast; to compare, or to debug).
func newRegistry(log *slog.Logger, inprocess bool) (*host.Registry, error) {
	o := host.Options{Builtin: all.Builtin(), Dirs: pluginDirs(), Log: log}
	if !inprocess && os.Getenv("PIPE_BUILTINS") != "inprocess" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		o.BuiltinCmd = func() *exec.Cmd {
			cmd := exec.Command(self)
			cmd.Env = []string{serveEnv + "=builtin"}
			return cmd
		}
	}
	return host.New(o)
}

func (a *app) pluginsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "plugins",
		Short: "List the plugins: pipe's built-ins and pipe-plugin-NAME executables on the plugin path",
		Long: `plugins lists the endpoint plugins pipe can use: its built-in endpoints and
every executable named pipe-plugin-NAME on the plugin path, in order:
PIPE_PLUGIN_PATH (colon-separated), ./.pipe/plugins, and
$XDG_DATA_HOME/pipe/plugins (~/.local/share/pipe/plugins). Each plugin is
started to ask for its version and endpoint types.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := a.openRegistry()
			if err != nil {
				return err
			}
			infos := reg.Plugins()
			if asJSON {
				return writeJSON(a.stdout, map[string]any{"path": pluginDirs(), "plugins": infos})
			}
			fmt.Fprintf(a.stdout, "plugin path: %s\n\n", strings.Join(pluginDirs(), ":"))
			for _, p := range infos {
				fmt.Fprintf(a.stdout, "%s %s\n  %s\n", p.Name, p.Version, p.Path)
				if p.SHA256 != "" {
					fmt.Fprintf(a.stdout, "  sha256 %s\n", p.SHA256)
				}
				if p.Error != "" {
					fmt.Fprintf(a.stdout, "  error: %s\n", p.Error)
					continue
				}
				fmt.Fprintf(a.stdout, "  sources: %s\n  sinks:   %s\n", orNone(p.Sources), orNone(p.Sinks))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(a.pluginSchemaCmd())
	return cmd
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

func (a *app) pluginSchemaCmd() *cobra.Command {
	var markdown bool
	cmd := &cobra.Command{
		Use:   "schema TYPE...",
		Short: "Print the configuration reference of endpoint types (built-in or a plugin's)",
		Long: `schema prints every attribute of each endpoint type named, as a source and
as a sink: its type, default, whether it is required or secret, and what it
does. The built-ins are fs, exec, s3, gcs, azure, postgres and mysql
(schemas/endpoints.md in pipe's source is the same in Markdown); any other
type is asked of its plugin. Exit code 1 for a type nothing provides.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			reg, err := a.openRegistry()
			if err != nil {
				return err
			}
			for i, typ := range args {
				if i > 0 {
					fmt.Fprintln(a.stdout)
				}
				found := false
				for _, kind := range []string{"source", "sink"} {
					s, ok, err := reg.Schema(kind, typ)
					if err != nil {
						fmt.Fprintln(a.stderr, "Error:", err)
						return &exitError{exitFailed}
					}
					if !ok {
						continue
					}
					found = true
					writeSchema(a.stdout, kind, typ, s, markdown)
				}
				if !found {
					fmt.Fprintf(a.stderr, "Error: no endpoint type %q; types: sources %s; sinks %s\n", typ, strings.Join(reg.Types("source"), ", "), strings.Join(reg.Types("sink"), ", "))
					return &exitError{exitFailed}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&markdown, "markdown", false, "print Markdown (as in schemas/endpoints.md)")
	return cmd
}

// writeSchema prints one endpoint's configuration reference.
func writeSchema(w interface{ Write([]byte) (int, error) }, kind, typ string, s sdk.Schema, markdown bool) {
	attrs := append([]sdk.Attribute(nil), s.Attributes...)
	sort.SliceStable(attrs, func(i, j int) bool { return attrs[i].Required && !attrs[j].Required })
	if markdown {
		fmt.Fprintf(w, "## %s \"%s\"\n\n%s\n\n", kind, typ, s.Description)
		switch {
		case s.Storage && kind == "sink":
			fmt.Fprintf(w, "Storage: objects can be read back by a restore, and the run's manifest is written here.\n\n")
		case s.Storage:
			fmt.Fprintf(w, "Storage: a folder or prefix is read as runs, through their manifests (the newest complete run by default); one object named on purpose is read as it is.\n\n")
		}
		fmt.Fprintf(w, "| attribute | type | | description |\n|---|---|---|---|\n")
		for _, a := range attrs {
			fmt.Fprintf(w, "| `%s` | %s | %s | %s |\n", a.Name, a.Type, attrNotes(a), strings.ReplaceAll(a.Description, "|", "\\|"))
		}
		return
	}
	fmt.Fprintf(w, "%s \"%s\"\n  %s\n", kind, typ, s.Description)
	width := 12
	for _, a := range attrs {
		width = max(width, len(a.Name))
	}
	for _, a := range attrs {
		fmt.Fprintf(w, "  %-*s %-13s %s\n", width, a.Name, a.Type, attrNotes(a))
		if a.Description != "" {
			fmt.Fprintf(w, "  %-*s %-13s %s\n", width, "", "", a.Description)
		}
	}
}

// defaultText is an attribute's default as it would be written in a
// pipeline file: sizes as "16 MiB", durations as "30s".
func defaultText(a sdk.Attribute) string {
	switch v := a.Default.(type) {
	case int64:
		if a.Type == sdk.Size {
			return pipefile.HumanSize(v)
		}
	case time.Duration:
		return v.String()
	case string:
		return strconv.Quote(v)
	}
	return fmt.Sprint(a.Default)
}

func attrNotes(a sdk.Attribute) string {
	var notes []string
	if a.Required {
		notes = append(notes, "required")
	}
	if a.Default != nil {
		notes = append(notes, "default "+defaultText(a))
	}
	if a.Secret {
		notes = append(notes, "secret")
	}
	if a.Key {
		notes = append(notes, "per-stream path")
	}
	if a.StreamName {
		notes = append(notes, "a stream name")
	}
	if a.Key || a.Public || a.StreamName {
		notes = append(notes, "never secret")
	}
	return strings.Join(notes, ", ")
}
