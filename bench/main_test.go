package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
	want := "copy, compress, decompress, plugins, s3, decode, catalog, postgres, pgcluster, mysqlcluster, wal, basebackup"
	if got := strings.Join(scenarioNames(), ", "); got != want {
		t.Errorf("scenarios %s, want %s", got, want)
	}
}
