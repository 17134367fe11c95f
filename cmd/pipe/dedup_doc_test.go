package main

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDedupWithoutPipe runs the script of "Deduplicated runs" in
// docs/restore-without-pipe.md, as written there, on a deduplicated run
// of two files, and compares what it rebuilds with them.
func TestDedupWithoutPipe(t *testing.T) {
	for _, tool := range []string{"bash", "jq", "age", "zstd", "sha256sum"} {
		if _, err := exec.LookPath(tool); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("%s is not installed; make test-deps installs it", tool)
			}
			t.Skipf("%s is not installed", tool)
		}
	}
	src, err := os.ReadFile("../../docs/restore-without-pipe.md")
	if err != nil {
		t.Fatal(err)
	}
	script := ""
	for _, f := range parseMarkdown(string(src)).fences {
		if f.info == "sh" && strings.Contains(f.body, ".dedup.packs") {
			script = f.body
		}
	}
	if script == "" {
		t.Fatal("docs/restore-without-pipe.md has no sh block reading .dedup.packs under Deduplicated runs")
	}
	dir := t.TempDir()
	t.Chdir(dir)
	r := rand.New(rand.NewPCG(1, 2))
	files := map[string][]byte{"in/a.txt": nil, "in/sub/b.bin": make([]byte, 700_000)}
	var a bytes.Buffer
	for a.Len() < 3_000_000 {
		a.WriteString(strings.Repeat("row ", 1+r.IntN(20)) + "\n")
	}
	files["in/a.txt"] = a.Bytes()
	for i := range files["in/sub/b.bin"] {
		files["in/sub/b.bin"][i] = byte(r.Uint32())
	}
	for name, b := range files {
		os.MkdirAll(filepath.Dir(name), 0o755)
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile("p.hcl", []byte(`pipeline "nightly" {
  source "fs" { path = "in" }
  dedup {
    key        = file("keys/dedup.key")
    chunk_size = "64KiB"
  }
  compress {}
  encrypt { recipients = [file("keys/backup.pub")] }
  sink "fs" { path = "backups/nightly/${run.id}/" }
}
`), 0o644)
	for _, args := range [][]string{{"keygen"}, {"keygen", "--dedup"}, {"run", "p.hcl"}} {
		var out, errb bytes.Buffer
		if code := execute(&out, &errb, args); code != 0 {
			t.Fatalf("pipe %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
		}
	}
	runs, _ := filepath.Glob("backups/nightly/2*")
	if len(runs) != 1 {
		t.Fatalf("runs %v", runs)
	}
	// The script as the page has it, for this run.
	lines := strings.Split(script, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "run=") {
			lines[i] = "run=" + runs[0]
		}
	}
	cmd := exec.Command("bash", "-c", strings.Join(lines, "\n"))
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("the script: %v\n%s", err, out)
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join("restored-by-hand", strings.TrimPrefix(name, "in/")))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s rebuilt without pipe: %d bytes of %d, %v", name, len(got), len(want), err)
		}
	}
}
