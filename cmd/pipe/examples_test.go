package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// pipeCLI runs the CLI in-process in the working directory.
func pipeCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := execute(&out, &errb, args); code != 0 {
		t.Fatalf("pipe %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
	}
	return out.String() + errb.String()
}

// exampleRecipes says how each file under examples/ is exercised. Every
// example must have one: an example nobody runs rots.
var exampleRecipes = map[string]func(t *testing.T, repo string){
	"quickstart.hcl": func(t *testing.T, repo string) {
		work := t.TempDir()
		gen := exec.Command("go", "run", "./examples/sampledata", "-out", filepath.Join(work, "examples", "data"), "-mb", "6")
		gen.Dir = repo
		if out, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("sampledata: %v\n%s", err, out)
		}
		os.MkdirAll(filepath.Join(work, "examples"), 0o755)
		src, _ := os.ReadFile(filepath.Join(repo, "examples", "quickstart.hcl"))
		os.WriteFile(filepath.Join(work, "examples", "quickstart.hcl"), src, 0o644)
		t.Chdir(work)
		pipeCLI(t, "keygen", "--if-missing")
		pipeCLI(t, "validate", "examples/quickstart.hcl")
		pipeCLI(t, "run", "examples/quickstart.hcl", "--pipeline", "backup", "--progress", "never")
		pipeCLI(t, "run", "examples/quickstart.hcl", "--pipeline", "restore", "--progress", "never")
		if out, err := exec.Command("diff", "-r", "examples/data", "out/restored").CombinedOutput(); err != nil {
			t.Fatalf("restored data differs: %v\n%s", err, out)
		}
	},
}

func TestExamples(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(repo, "examples", "*.hcl"))
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			recipe, ok := exampleRecipes[name]
			if !ok {
				t.Fatalf("examples/%s has no recipe in TestExamples: add one that runs it", name)
			}
			recipe(t, repo)
		})
	}
}
