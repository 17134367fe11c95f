package command

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// A program that fails and stops reading: the next write fails, and Abort
// (what the host calls across the plugin boundary after EPIPE) reports the
// program's error, not just a broken pipe.
func TestAbortAfterTheProgramFailedReportsWhy(t *testing.T) {
	w, err := Write(context.Background(), Spec{Argv: []string{"sh", "-c", "head -c 10 >/dev/null; echo 'ERROR: relation exists' >&2; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	// Write through the file, as the host does, until the pipe breaks.
	buf := make([]byte, 64<<10)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := w.File().Write(buf); err != nil {
			break
		}
	}
	err = w.Abort(context.Background())
	if err == nil || !strings.Contains(err.Error(), "exited with status 3") || !strings.Contains(err.Error(), "ERROR: relation exists") {
		t.Fatalf("Abort = %v, want the program's status and message", err)
	}
}

// Abort of a program still reading stops it and is not an error.
func TestAbortStopsAReadingProgram(t *testing.T) {
	w, err := Write(context.Background(), Spec{Argv: []string{"sh", "-c", "cat >/dev/null"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("some input")); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := w.Abort(context.Background()); err != nil {
		t.Fatalf("Abort = %v", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Abort took %s", d)
	}
}

// Secrets passed to a program never appear in its errors.
func TestWaitScrubsSecrets(t *testing.T) {
	r, err := Read(context.Background(), Spec{Argv: []string{"sh", "-c", "echo \"bad password $PW\" >&2; exit 1"}, Env: []string{"PW=hunter2-secret"}, Secrets: []string{"hunter2-secret"}})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	for {
		if _, err := r.Read(buf); err != nil {
			break
		}
	}
	err = r.Close()
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "(sensitive)") {
		t.Fatalf("Close = %v, want the error with the secret scrubbed", err)
	}
}

// Explain adds what to do to the error of a program whose message it
// knows, after the secrets are scrubbed; it sees neither a secret nor a
// program that succeeded.
func TestExplainAddsWhatToDo(t *testing.T) {
	var seen []string
	explain := func(msg string) string {
		seen = append(seen, msg)
		if strings.Contains(msg, "no TLS") {
			return "turn TLS on"
		}
		return ""
	}
	for _, tc := range []struct{ script, want string }{
		{"echo \"no TLS for $PW\" >&2; exit 1", "sh exited with status 1: no TLS for (sensitive); turn TLS on"},
		{"echo 'disk full' >&2; exit 2", "sh exited with status 2: disk full"},
	} {
		_, err := Output(context.Background(), Spec{Argv: []string{"sh", "-c", tc.script}, Env: []string{"PW=hunter2-secret"}, Secrets: []string{"hunter2-secret"}, Explain: explain}, "")
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: %v, want %q", tc.script, err, tc.want)
		}
	}
	if _, err := Output(context.Background(), Spec{Argv: []string{"sh", "-c", "echo 'no TLS' >&2"}, Explain: explain}, ""); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || strings.Contains(strings.Join(seen, " "), "hunter2") {
		t.Errorf("Explain saw %q", seen)
	}
}

// Cleanup runs once the program ended, and when it could not start.
func TestCleanupRunsWhenTheProgramEnds(t *testing.T) {
	ran := 0
	out, err := Output(context.Background(), Spec{Argv: []string{"sh", "-c", "cat; echo done"}, Cleanup: func() { ran++ }}, "in ")
	if err != nil || out != "in done\n" || ran != 1 {
		t.Fatalf("Output = %q, %v; cleanup ran %d times, want once", out, err, ran)
	}
	ran = 0
	if _, err := Read(context.Background(), Spec{Argv: []string{"/nonexistent/program"}, Cleanup: func() { ran++ }}); err == nil || ran != 1 {
		t.Fatalf("Read of a missing program: %v; cleanup ran %d times, want once", err, ran)
	}
}

// What a program leaves running when it exits ends with it: a background
// child would otherwise outlive the run (and hold its pipes open).
func TestLeftoversEndWithTheProgram(t *testing.T) {
	marker := fmt.Sprintf("sleep 41.%d", os.Getpid())
	out, err := Output(context.Background(), Spec{Argv: []string{"sh", "-c", marker + " & echo started"}}, "")
	if err != nil || strings.TrimSpace(out) != "started" {
		t.Fatalf("out %q, err %v", out, err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if !running(marker) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still runs after its shell exited", marker)
		}
	}
}

// running reports whether a process's command line is s.
func running(s string) bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == s {
			return true
		}
	}
	return false
}
