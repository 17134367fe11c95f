package plan_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/profiles"
)

// The corpus of bad pipeline files: testdata/bad/NAME.hcl (from the module
// root) holds one mistake each, or several to show that one load reports
// all of them; testdata/bad/NAME.golden is what `pipe validate` prints for
// it. `go test ./plan/ -run TestBadCorpus -update` rewrites the goldens.
//
// A file's leading comment lines may hold directives:
//
//	# vars: name=value …   --var overrides (Options.Vars)
//	# env: NAME=value …    the whole environment the file sees (env(),
//	                       PIPE_VAR_name); the host's never leaks in
//	# expect: warnings     the file is valid but must draw warnings
//	# expect: errors=N     the file must draw exactly N errors
//	# run: true            load as `pipe run` does (a run id is known, so a
//	                       variable or env() without a value is an error
//	                       where it is used; validate carries them unknown)

var update = flag.Bool("update", false, "rewrite the goldens of testdata/bad")

const (
	corpusDir  = "../testdata/bad"
	corpusName = "testdata/bad" // how files are named in diagnostics
	minCorpus  = 35
)

var (
	corpusNow  = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	corpusHost = profiles.Host{CPUs: 2, Memory: 24 << 30}
)

// directives are the options a corpus file asks for in its first lines.
type directives struct {
	vars         map[string]string
	env          map[string]string
	warningsOnly bool
	errors       int // -1: any number (at least one)
	run          bool
}

func parseDirectives(src []byte) (directives, error) {
	d := directives{vars: map[string]string{}, env: map[string]string{}, errors: -1}
	for _, line := range strings.Split(string(src), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "#") {
			break
		}
		key, rest, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "#")), ":")
		if !ok {
			continue
		}
		switch key {
		case "vars", "env":
			m := d.vars
			if key == "env" {
				m = d.env
			}
			for _, kv := range strings.Fields(rest) {
				name, value, ok := strings.Cut(kv, "=")
				if !ok || name == "" {
					return d, fmt.Errorf("%s: %q is not name=value", key, kv)
				}
				m[name] = value
			}
		case "run":
			d.run = strings.TrimSpace(rest) == "true"
		case "expect":
			for _, w := range strings.Fields(rest) {
				switch {
				case w == "warnings":
					d.warningsOnly = true
				case strings.HasPrefix(w, "errors="):
					n, err := strconv.Atoi(strings.TrimPrefix(w, "errors="))
					if err != nil {
						return d, fmt.Errorf("expect: %q: %v", w, err)
					}
					d.errors = n
				default:
					return d, fmt.Errorf("expect: unknown %q", w)
				}
			}
		}
	}
	return d, nil
}

func newRegistry(t testing.TB) *host.Registry {
	reg, err := host.NewRegistry(all.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

// check loads and plans src the way `pipe validate` does and returns the
// diagnostics, rendered without color.
func check(reg *host.Registry, path string, src []byte, d directives) (*pipefile.File, hcl.Diagnostics, string, error) {
	file, diags := pipefile.LoadSource(path, src, pipefile.Options{
		Vars: d.vars,
		LookupEnv: func(name string) (string, bool) {
			v, ok := d.env[name]
			return v, ok
		},
		RunID:   runID(d),
		Now:     corpusNow,
		Dir:     "..", // file("testdata/…") starts at the module root
		Schemas: reg,
	})
	// The planner runs on what loaded, errors or not: a block with a
	// mistake in one attribute still reports the others' (every error at
	// once).
	_, pd := plan.New(file, plan.Options{Host: corpusHost})
	diags = append(diags, pd...)
	var buf bytes.Buffer
	err := pipefile.WriteDiagnostics(&buf, file.Files(), diags, false)
	return file, diags, buf.String(), err
}

// runID is the run id a corpus file is loaded with: none, as validate
// does, unless it asks to be loaded as a run.
func runID(d directives) string {
	if d.run {
		return "20250601T120000Z-abcdef"
	}
	return ""
}

func TestBadCorpus(t *testing.T) {
	reg := newRegistry(t)
	paths, err := filepath.Glob(filepath.Join(corpusDir, "*.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) < minCorpus {
		t.Errorf("the corpus has %d files, want at least %d", len(paths), minCorpus)
	}
	names := map[string]bool{}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".hcl")
		names[name] = true
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			d, err := parseDirectives(src)
			if err != nil {
				t.Fatalf("directives: %v", err)
			}
			file, diags, out, err := check(reg, corpusName+"/"+name+".hcl", src, d)
			if err != nil {
				t.Fatalf("WriteDiagnostics: %v", err)
			}

			errs, warns := 0, 0
			for _, dg := range diags {
				switch dg.Severity {
				case hcl.DiagError:
					errs++
				case hcl.DiagWarning:
					warns++
				}
			}
			switch {
			case len(diags) == 0:
				t.Errorf("no diagnostics at all: the file should be rejected")
			case d.warningsOnly && errs > 0:
				t.Errorf("expect: warnings, but got %d error(s):\n%s", errs, out)
			case d.warningsOnly && warns == 0:
				t.Errorf("expect: warnings, but got none:\n%s", out)
			case !d.warningsOnly && errs == 0:
				t.Errorf("no error, only %d warning(s) (mark the file `# expect: warnings` if that is right):\n%s", warns, out)
			case d.errors >= 0 && errs != d.errors:
				t.Errorf("got %d errors, want %d (all errors of a file in one load):\n%s", errs, d.errors, out)
			}
			for _, dg := range diags {
				if strings.TrimSpace(dg.Summary) == "" {
					t.Errorf("a diagnostic without summary: %+v", dg)
				}
			}

			// Secrets never reach a message: not the values the loader
			// knows are secret, not the environment's keys.
			for _, s := range file.Secrets() {
				if strings.Contains(out, s) {
					t.Errorf("the diagnostics show the secret %q:\n%s", s, out)
				}
			}
			for name, v := range d.env {
				if strings.Contains(v, "AGE-SECRET-KEY") && strings.Contains(out, v) {
					t.Errorf("the diagnostics show the secret key in $%s:\n%s", name, out)
				}
			}
			if strings.Contains(strings.ToUpper(out), "AGE-SECRET-KEY-1") {
				t.Errorf("the diagnostics show secret key text:\n%s", out)
			}

			golden := filepath.Join(corpusDir, name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(out), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./plan/ -run TestBadCorpus -update)", err)
			}
			if out != string(want) {
				t.Errorf("diagnostics differ from %s (-update rewrites it)\n--- got\n%s\n--- want\n%s", golden, out, want)
			}
		})
	}

	// A golden without its file is left over from a removed case.
	goldens, _ := filepath.Glob(filepath.Join(corpusDir, "*.golden"))
	var orphans []string
	for _, g := range goldens {
		if name := strings.TrimSuffix(filepath.Base(g), ".golden"); !names[name] {
			orphans = append(orphans, g)
		}
	}
	sort.Strings(orphans)
	for _, g := range orphans {
		if *update {
			os.Remove(g)
			continue
		}
		t.Errorf("%s has no .hcl file; delete it", g)
	}
}

// The directives themselves.
func TestParseDirectives(t *testing.T) {
	src := "# vars: a=1 b=x=y\n# env: HOME=/h\n# expect: errors=3\n\n# vars: c=2\npipeline \"x\" {}\n"
	d, err := parseDirectives([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if d.vars["a"] != "1" || d.vars["b"] != "x=y" || d.vars["c"] != "" || d.env["HOME"] != "/h" || d.errors != 3 || d.warningsOnly {
		t.Errorf("got %+v", d)
	}
	if _, err := parseDirectives([]byte("# expect: nothing\n")); err == nil {
		t.Error("unknown expectation accepted")
	}
}
