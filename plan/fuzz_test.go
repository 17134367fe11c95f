package plan_test

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
)

// FuzzLoad feeds arbitrary bytes through the loader, the planner and both
// plan printers, as `pipe validate` and `pipe plan` do: whatever the file
// says, they report diagnostics and never panic. Seeds: the bad corpus and
// the examples. `make fuzz` runs it.
func FuzzLoad(f *testing.F) {
	var seeds []string
	for _, pattern := range []string{filepath.Join(corpusDir, "*.hcl"), "../examples/*.hcl"} {
		paths, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, paths...)
	}
	if len(seeds) == 0 {
		f.Fatal("no seeds")
	}
	for _, p := range seeds {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	reg := newRegistry(f)
	dir := f.TempDir() // file("relative") finds nothing: no key is read
	env := map[string]string{"PIPE_PASSPHRASE": "correct-horse-battery-staple", "PIPE_VAR_data": "examples/data"}

	f.Fuzz(func(t *testing.T, src []byte) {
		// file() reads whatever path it is given; a device would block or
		// fill memory rather than find a bug in the loader.
		for _, dev := range []string{"/dev/", "/proc/", "/sys/"} {
			if strings.Contains(string(src), dev) {
				t.Skip("names a device file")
			}
		}
		for _, runID := range []string{"", "20250601T120000Z-abcdef"} {
			file, diags := pipefile.LoadSource("fuzz.hcl", src, pipefile.Options{
				LookupEnv: func(name string) (string, bool) {
					v, ok := env[name]
					return v, ok
				},
				RunID:   runID,
				Now:     corpusNow,
				Dir:     dir,
				Schemas: reg,
			})
			if file == nil {
				t.Fatal("LoadSource returned no file")
			}
			// The planner runs on what loaded, errors or not, as the CLI
			// does; a plan is printed only when all is well.
			loaded := !diags.HasErrors()
			{
				pl, d := plan.New(file, plan.Options{Host: corpusHost, Memory: reg.Memory})
				diags = append(diags, d...)
				if loaded && !d.HasErrors() {
					if pl == nil {
						t.Fatal("plan.New returned no plan and no error")
					}
					pl.Print(io.Discard)
					if err := json.NewEncoder(io.Discard).Encode(pl.JSON()); err != nil {
						t.Fatalf("plan JSON: %v", err)
					}
				}
			}
			for _, d := range diags {
				if d == nil {
					t.Fatal("nil diagnostic")
				}
			}
			if err := pipefile.WriteDiagnostics(io.Discard, file.Files(), diags, false); err != nil {
				t.Fatalf("WriteDiagnostics: %v", err)
			}
		}
	})
}
