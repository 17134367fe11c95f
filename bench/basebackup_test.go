package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// The base backup scenario reads what the tools and the server wrote:
// bash's times, the restore_command wrapper's log, the server's redo
// line, a backup_label.

func TestBashTime(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0m0.000s", 0},
		{"0m1.250s", 1250 * time.Millisecond},
		{"2m3.5s", 123500 * time.Millisecond},
		{"1.5s", 0}, // not bash's format
		{"", 0},
	} {
		if got := bashTime(tc.in); got != tc.want {
			t.Errorf("bashTime(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestRestoreCommandLog(t *testing.T) {
	p := filepath.Join(t.TempDir(), "rc.log")
	// timed.sh's lines: start, end, exit status, then the last line of
	// `times`: the children's user and system time.
	text := "100.0 100.5 0 0m0.200s 0m0.100s\n" +
		"101.0 102.0 1 0m1.000s 0m0.500s\n" +
		"a short line\n"
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	calls, wall, cpu := restoreCommandLog(p)
	if calls != 2 || wall != 1500*time.Millisecond || cpu != 1800*time.Millisecond {
		t.Errorf("restoreCommandLog = %d calls, %v wall, %v CPU", calls, wall, cpu)
	}
	if calls, _, _ := restoreCommandLog(filepath.Join(t.TempDir(), "none")); calls != 0 {
		t.Errorf("no log: %d calls", calls)
	}
}

func TestRedoUsage(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, log   string
		cpu, elapse time.Duration
	}{
		{"the redo line", "LOG:  starting\nLOG:  redo done at 0/5000028 system usage: CPU: user: 1.50 s, system: 0.25 s, elapsed: 12.00 s\nLOG:  ready\n",
			1750 * time.Millisecond, 12 * time.Second},
		{"no redo", "LOG:  ready\n", 0, 0},
		{"a redo line without usage", "LOG:  redo done at 0/5000028\n", 0, 0},
	} {
		p := filepath.Join(dir, "restored.log")
		if err := os.WriteFile(p, []byte(tc.log), 0o644); err != nil {
			t.Fatal(err)
		}
		if cpu, elapsed := redoUsage(p); cpu != tc.cpu || elapsed != tc.elapse {
			t.Errorf("%s: redoUsage = %v, %v; want %v, %v", tc.name, cpu, elapsed, tc.cpu, tc.elapse)
		}
	}
}

func TestBackupStartLSN(t *testing.T) {
	dir := t.TempDir()
	if got := backupStartLSN(dir); got != "" {
		t.Errorf("no backup_label: %q", got)
	}
	label := "START WAL LOCATION: 0/9000028 (file 000000010000000000000009)\nCHECKPOINT LOCATION: 0/9000060\n"
	if err := os.WriteFile(filepath.Join(dir, "backup_label"), []byte(label), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := backupStartLSN(dir); got != "0/9000028" {
		t.Errorf("backupStartLSN = %q", got)
	}
}

func TestShellQuoting(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "'plain'"},
		{"it's", `'it'\''s'`},
		{"$HOME *", "'$HOME *'"},
	} {
		if got := shq(tc.in); got != tc.want {
			t.Errorf("shq(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if got := envPrefix([]string{"A=1", "B=x y"}); got != "env 'A=1' 'B=x y'" {
		t.Errorf("envPrefix = %s", got)
	}
	if got := tail("a\nb\nc\n", 2); got != "b\nc" {
		t.Errorf("tail = %q", got)
	}
}
