package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The Memory section of docs/postgresql-archiving.md shows an archive and
// the budget line `pipe plan` prints for it: the line is what pipe plan
// prints for that file, and the store counts one segment's object in
// transfer, not the part_size × concurrency of a backup's (2 GiB for the
// same store).
func TestArchiveMemoryDoc(t *testing.T) {
	page, err := os.ReadFile("../../docs/postgresql-archiving.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(page), "\n## Memory\n")
	if !ok {
		t.Fatal("docs/postgresql-archiving.md has no Memory section")
	}
	md := parseMarkdown(section)
	if len(md.fences) < 2 || md.fences[0].info != "hcl" {
		t.Fatalf("the Memory section should show an archive (```hcl) and its plan's memory line: %d fenced blocks", len(md.fences))
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "pg.hcl")
	if err := os.WriteFile(file, []byte(md.fences[0].body), 0o600); err != nil {
		t.Fatal(err)
	}
	// The budget counts a codec's state per CPU: the page's line is a
	// 2-CPU machine's.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	code, out, stderr := runPipe("plan", file)
	if code != 0 {
		t.Fatalf("pipe plan: exit %d: %s", code, stderr)
	}
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "memory ") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("pipe plan printed no memory line:\n%s", out)
	}
	if strings.TrimSpace(md.fences[1].body) != strings.TrimSpace(line) {
		t.Errorf("the docs show\n%s\npipe plan prints\n%s", strings.TrimSpace(md.fences[1].body), line)
	}
	if !strings.Contains(line, "+ store 20 MiB +") {
		t.Errorf("the store is not counted for one segment's object in transfer (16 MiB, and 4 connections): %s", line)
	}
}
