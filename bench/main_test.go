package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// fakePipe is an executable file for -pipe.
func fakePipe(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "pipe")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestParseFlags(t *testing.T) {
	pipe := fakePipe(t)
	for _, tc := range []struct {
		name string
		args []string
		reps int
		size int64
		err  string
	}{
		{name: "defaults", args: nil, reps: 5, size: 600_000_000},
		{name: "quick", args: []string{"-quick"}, reps: 2, size: 100_000_000},
		{name: "quick with its reps", args: []string{"-quick", "-reps", "1"}, reps: 1, size: 100_000_000},
		{name: "no reps", args: []string{"-reps", "-1"}, err: "-reps must be at least 1"},
		{name: "an argument", args: []string{"copy"}, err: "unexpected arguments: copy"},
		{name: "a scenario no one has", args: []string{"-only", "copy,s4"}, err: `-only: no scenario "s4"`},
		{name: "memory alone", args: []string{"-only", "memory"}, reps: 5, size: 600_000_000},
		// go test runs in bench/, where there is no bench/reports.
		{name: "-report away from the repository's root", args: []string{"-report", "x"}, err: "no folder bench/reports"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFlags(append([]string{"-pipe", pipe}, tc.args...))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("parseFlags(%q) = %v, want %q", tc.args, err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.reps != tc.reps || c.dataSize != tc.size || c.pipe != pipe {
				t.Errorf("parseFlags(%q): reps %d, data %d, pipe %s", tc.args, c.reps, c.dataSize, c.pipe)
			}
		})
	}
	if _, err := parseFlags([]string{"-pipe", filepath.Dir(pipe)}); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Errorf("a folder as -pipe: %v", err)
	}
}

func TestConfigRuns(t *testing.T) {
	for _, tc := range []struct {
		only    string
		skipMem bool
		want    []string
	}{
		{"", false, append(scenarioNames(), "memory")},
		{"", true, scenarioNames()},
		{"copy,wal", false, []string{"copy", "wal", "memory"}},
		{"memory", false, []string{"memory"}},
		{"memory", true, nil},
		{"postgres", true, []string{"postgres"}}, // not pgcluster: names, not substrings
	} {
		c := config{only: tc.only, skipMem: tc.skipMem}
		var got []string
		for _, s := range scenarios {
			if c.runs(s.name) {
				got = append(got, s.name)
			}
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("-only %q, -skip-memory %v: runs %v, want %v", tc.only, tc.skipMem, got, tc.want)
		}
	}
}

// TestScenarioNames: -only's list, as its help and docs/benchmarks.md
// give it, in run order.
func TestScenarioNames(t *testing.T) {
	want := "copy, compress, decompress, plugins, s3, decode, catalog, postgres, pgcluster, mysqlcluster, mariaphysical, wal, basebackup, incremental, dedup, dedupbase"
	if got := strings.Join(scenarioNames(), ", "); got != want {
		t.Errorf("scenarios %s, want %s", got, want)
	}
}

func TestReportPath(t *testing.T) {
	dir := t.TempDir()
	now := time.Date(2026, 11, 28, 23, 30, 0, 0, time.FixedZone("UTC+2", 2*3600)) // 21:30 UTC
	if err := os.WriteFile(filepath.Join(dir, "2026-11-28-taken.md"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, name string
		want      string // the path, or a part of the error
		ok        bool
	}{
		{dir, "copy-l2", filepath.Join(dir, "2026-11-28-copy-l2.md"), true},
		{dir, "s3_tag.second", filepath.Join(dir, "2026-11-28-s3_tag.second.md"), true},
		{dir, "taken", "exists", false},
		{dir, "../elsewhere", "a name of letters", false},
		{dir, "a b", "a name of letters", false},
		{dir, ".hidden", "a name of letters", false},
		{filepath.Join(dir, "none"), "copy", "no folder", false},
	} {
		got, err := reportPath(tc.dir, tc.name, now)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("reportPath(%q) = %q, %v; want %q", tc.name, got, err, tc.want)
		}
		if !tc.ok && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("reportPath(%q) = %q, %v; want an error with %q", tc.name, got, err, tc.want)
		}
	}
}

func TestRecord(t *testing.T) {
	p := filepath.Join(t.TempDir(), "2026-11-28-x.md")
	if err := record("# report\n", p); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "# report\n" {
		t.Errorf("the record holds %q, %v", b, err)
	}
	if err := record("# another\n", p); err == nil {
		t.Error("a second record overwrote the first")
	}
	if b, _ := os.ReadFile(p); string(b) != "# report\n" {
		t.Errorf("the record holds %q after a refused write", b)
	}
	if err := record("text", ""); err != nil {
		t.Errorf("no -report: %v", err)
	}
}

// shellLine quotes every argument for /bin/sh -c, as PostgreSQL's
// archive_command line would: spaces and quotes reach the program as
// they were.
func TestShellLine(t *testing.T) {
	argv := []string{"printf", "%s|", "a b", "it's", "$HOME", ""}
	out, err := exec.Command("/bin/sh", "-c", shellLine(argv)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(out), "a b|it's|$HOME||"; got != want {
		t.Errorf("sh -c %s printed %q, want %q", shellLine(argv), got, want)
	}
}
