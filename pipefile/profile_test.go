package pipefile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// setProfile writes src to a file, sets pipeline p's profile to turbo and
// returns the file as it is then.
func setProfile(t *testing.T, dir, src string) (string, error) {
	t.Helper()
	p := filepath.Join(dir, "p.hcl")
	if err := os.WriteFile(p, []byte(src), 0o640); err != nil {
		t.Fatal(err)
	}
	err := SetProfile(p, "p", "turbo")
	b, _ := os.ReadFile(p)
	return string(b), err
}

func TestSetProfileRefusals(t *testing.T) {
	dir := t.TempDir()
	write := func(src string) (string, error) { return setProfile(t, dir, src) }
	const byVar = "variable \"prof\" { default = \"balanced\" }\npipeline \"p\" {\n  profile = var.prof\n}\n"
	if got, err := write(byVar); err == nil || !strings.Contains(err.Error(), "is an expression") || got != byVar {
		t.Errorf("a profile set by a variable: err %v, file %q", err, got)
	}
	const oneLine = "pipeline \"p\" { streams = 2 }\n"
	if got, err := write(oneLine); err == nil || !strings.Contains(err.Error(), "one line") || got != oneLine {
		t.Errorf("a pipeline on one line: err %v, file %q", err, got)
	}
	if _, err := write("pipeline \"q\" {\n}\n"); err == nil || !strings.Contains(err.Error(), `no pipeline "p"`) {
		t.Errorf("no such pipeline: err %v", err)
	}
	got, err := write("pipeline \"p\" {\n}\n")
	if err != nil || got != "pipeline \"p\" {\n  profile = \"turbo\"\n}\n" {
		t.Errorf("an empty block: err %v, file %q", err, got)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "p.hcl")); fi.Mode().Perm() != 0o640 {
		t.Errorf("the file's mode changed to %v", fi.Mode().Perm())
	}
}

// The value of a literal profile is replaced, its comment kept; a block
// without one gets a line at its top, indented as the block's first line
// and kept apart from the attributes that follow; other pipelines and
// comments are untouched.
func TestSetProfileEdits(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, src, want string }{
		{"replaces the value",
			"# keep me\npipeline \"q\" {\n  profile = \"balanced\"\n}\n\npipeline \"p\" {\n  profile = \"balanced\" # why\n\n  source \"fs\" { path = \"in\" }\n}\n",
			"# keep me\npipeline \"q\" {\n  profile = \"balanced\"\n}\n\npipeline \"p\" {\n  profile = \"turbo\" # why\n\n  source \"fs\" { path = \"in\" }\n}\n"},
		{"adds a line at the top",
			"pipeline \"p\" {\n    # Where the data is.\n    source \"fs\" { path = \"in\" }\n}\n",
			"pipeline \"p\" {\n    profile = \"turbo\"\n\n    # Where the data is.\n    source \"fs\" { path = \"in\" }\n}\n"},
		{"before a blank line, none added",
			"pipeline \"p\" {\n\n  streams = 2\n}\n",
			"pipeline \"p\" {\n  profile = \"turbo\"\n\n  streams = 2\n}\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := setProfile(t, dir, tc.src)
			if err != nil || got != tc.want {
				t.Fatalf("err %v, file\n%s\nwant\n%s", err, got, tc.want)
			}
		})
	}
}
