// Package examples_test checks every pipeline file under examples/, in
// folders too: each is valid (pipe validate, with placeholders for the
// variables a user must give) and formatted (pipe fmt --check). The
// commands of the exec examples (ClickHouse, MongoDB) also run, against
// stand-ins for their tools, to show that each tool gets its password and
// that no password is on a command line. cmd/pipe's TestExamples runs the
// top-level examples end to end.
package examples_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var (
	pipeBin    string // the pipe binary, built once
	pluginPath string // holds pipe-plugin-redis, which redis-backup.hcl uses
	work       string // the working directory of every run: keys/backup.{key,pub}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "pipe-examples-")
	if err != nil {
		panic(err)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		pipeBin = filepath.Join(dir, "pipe")
		pluginPath = filepath.Join(dir, "plugins")
		work = filepath.Join(dir, "work")
		for _, b := range [][]string{{"-o", pipeBin, "../cmd/pipe"}, {"-o", filepath.Join(pluginPath, "pipe-plugin-redis"), "./plugins/redis"}} {
			if out, err := exec.Command("go", append([]string{"build"}, b...)...).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "go build %v: %v\n%s", b, err, out)
				return 1
			}
		}
		os.MkdirAll(work, 0o755)
		if out, err := pipe(nil, "keygen", "-o", "keys/backup"); err != nil {
			fmt.Fprintf(os.Stderr, "pipe keygen: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// password is what the examples' sensitive variables are set to: every
// character a shell, YAML or a command line could mangle.
const password = `p#s "w'rd" \ $HOME x: y `

// vars are the variables the examples need from their user.
var vars = []string{
	"PIPE_VAR_bucket=example-bucket",
	"PIPE_VAR_clickhouse_password=" + password,
	"PIPE_VAR_mongo_password=" + password,
	"PIPE_VAR_pg_password=" + password,
	"PIPE_VAR_mysql_password=" + password,
	"PIPE_VAR_database=shop",
	"PIPE_VAR_target=shop_restored",
}

// pipe runs the pipe binary in work with the examples' variables and the
// plugin path.
func pipe(env []string, args ...string) (string, error) {
	return pipeIn(work, append(append(os.Environ(), vars...), append(env, "PIPE_PLUGIN_PATH="+pluginPath)...), args...)
}

// pipeIn runs the pipe binary in dir with exactly the environment env and
// returns what it printed, stdout and stderr together.
func pipeIn(dir string, env []string, args ...string) (string, error) {
	cmd := exec.Command(pipeBin, args...)
	cmd.Dir, cmd.Env = dir, env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// examples lists every .hcl file under examples/, relative to it.
func examples(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".hcl") {
			files = append(files, filepath.ToSlash(p))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"quickstart.hcl", "redis-backup.hcl", "clickhouse/backup.hcl", "clickhouse/restore.hcl", "mongodb/backup.hcl", "mongodb/restore.hcl"} {
		if !slices.Contains(files, want) {
			t.Errorf("examples/%s was not found", want)
		}
	}
	return files
}

// abs is the absolute path of an example (pipe runs elsewhere).
func abs(t *testing.T, file string) string {
	t.Helper()
	p, err := filepath.Abs(file)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestValidate(t *testing.T) {
	for _, f := range examples(t) {
		t.Run(f, func(t *testing.T) {
			if out, err := pipe(nil, "validate", abs(t, f)); err != nil {
				t.Errorf("pipe validate examples/%s: %v\n%s", f, err, out)
			}
			if out, err := pipe(nil, "fmt", "--check", abs(t, f)); err != nil {
				t.Errorf("pipe fmt --check examples/%s: %v (run pipe fmt on it)\n%s", f, err, out)
			}
		})
	}
}

// fakeTool stands in for clickhouse-client, mongodump and mongorestore: it
// records its arguments, the password it was given (CLICKHOUSE_PASSWORD or
// the --config file) and how many bytes came on its stdin, and prints a
// line on stdout.
const fakeTool = `#!/bin/sh
log="$FAKE_LOG/$(basename "$0")"
printf '%s\n' "$@" > "$log.args"
printf '%s' "${CLICKHOUSE_PASSWORD-}" > "$log.env"
for a; do case "$a" in --config=*) cat "${a#--config=}" > "$log.config";; esac; done
case "$*" in *INSERT*|*--archive*--drop*) wc -c > "$log.stdin";; esac
echo "output of $(basename "$0")"
`

// endpoint is an exec endpoint of a plan: its command.
type endpoint struct {
	Type   string                     `json:"type"`
	Config map[string]json.RawMessage `json:"config"`
}

// execCommand returns the command of file's exec endpoint, as pipe plan
// resolves it.
func execCommand(t *testing.T, file string) []string {
	t.Helper()
	out, err := pipe(nil, "plan", "--json", abs(t, file))
	if err != nil {
		t.Fatalf("pipe plan: %v\n%s", err, out)
	}
	var plan struct {
		Pipelines []struct {
			Source endpoint   `json:"source"`
			Sinks  []endpoint `json:"sinks"`
		} `json:"pipelines"`
	}
	if err := json.Unmarshal([]byte(out), &plan); err != nil {
		t.Fatalf("pipe plan --json: %v\n%s", err, out)
	}
	if strings.Contains(out, password) {
		t.Errorf("pipe plan shows the password:\n%s", out)
	}
	for _, p := range plan.Pipelines {
		for _, e := range append([]endpoint{p.Source}, p.Sinks...) {
			if e.Type == "exec" {
				var argv []string
				if err := json.Unmarshal(e.Config["command"], &argv); err != nil {
					t.Fatalf("command %q: %v", e.Config["command"], err)
				}
				return argv
			}
		}
	}
	t.Fatalf("%s has no exec endpoint", file)
	return nil
}

// The exec examples' commands, run as pipe would run them (their env as the
// files set it), give each tool the password off its command line.
func TestExecCommands(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"clickhouse-client", "mongodump", "mongorestore"} {
		if err := os.WriteFile(filepath.Join(bin, tool), []byte(fakeTool), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	mongoURI := "mongodb://backup@db1:27017/?authSource=admin"
	for _, tc := range []struct {
		file, tool string
		env        []string
		args       []string // expected among the arguments
		restore    bool
	}{
		{"clickhouse/backup.hcl", "clickhouse-client", []string{"CLICKHOUSE_PASSWORD=" + password},
			[]string{"--query", "SELECT * FROM db.t FORMAT Native", "--user", "default"}, false},
		{"clickhouse/restore.hcl", "clickhouse-client", []string{"CLICKHOUSE_PASSWORD=" + password},
			[]string{"--query", "INSERT INTO db.t FORMAT Native"}, true},
		{"mongodb/backup.hcl", "mongodump", []string{"MONGO_URI=" + mongoURI, "MONGO_PASSWORD=" + password},
			[]string{"--archive", "--uri=" + mongoURI}, false},
		{"mongodb/restore.hcl", "mongorestore", []string{"MONGO_URI=" + mongoURI, "MONGO_PASSWORD=" + password},
			[]string{"--archive", "--drop", "--uri=" + mongoURI}, true},
	} {
		t.Run(tc.file, func(t *testing.T) {
			argv := execCommand(t, tc.file)
			log := t.TempDir()
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = append(append(os.Environ(), "FAKE_LOG="+log), tc.env...)
			if tc.restore {
				cmd.Stdin = strings.NewReader("a restored stream")
			}
			out, err := cmd.CombinedOutput()
			if err != nil || string(out) != "output of "+tc.tool+"\n" {
				t.Fatalf("%q: %v\n%s", argv, err, out)
			}
			read := func(ext string) string {
				b, _ := os.ReadFile(filepath.Join(log, tc.tool+ext))
				return string(b)
			}
			args := strings.Split(strings.TrimSuffix(read(".args"), "\n"), "\n")
			for _, a := range tc.args {
				if !slices.Contains(args, a) {
					t.Errorf("%s was not given %q: %q", tc.tool, a, args)
				}
			}
			if strings.Contains(read(".args"), "p#s") {
				t.Errorf("the password is on %s's command line: %q", tc.tool, args)
			}
			if tc.tool == "clickhouse-client" {
				if got := read(".env"); got != password {
					t.Errorf("CLICKHOUSE_PASSWORD = %q, want %q", got, password)
				}
			} else if got, want := read(".config"), "password: |-\n  "+password+"\n"; got != want {
				// A YAML literal block: every character of the line is
				// the password.
				t.Errorf("the --config file %q, want %q", got, want)
			}
			if tc.restore && strings.TrimSpace(read(".stdin")) != fmt.Sprint(len("a restored stream")) {
				t.Errorf("%s read %q bytes of its input", tc.tool, read(".stdin"))
			}
		})
	}
}
