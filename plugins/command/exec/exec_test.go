package exec

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

var ctx = context.Background()

func source(t *testing.T, values map[string]any) sdk.Source {
	t.Helper()
	s, d := SourceType{}.Configure(ctx, sdk.NewConfig(values))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s
}

func sink(t *testing.T, values map[string]any) sdk.Sink {
	t.Helper()
	s, d := SinkType{}.Configure(ctx, sdk.NewConfig(values))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s
}

func TestSourceReadsStdout(t *testing.T) {
	s := source(t, map[string]any{"command": []string{"sh", "-c", "printf hello; printf \" $SECRET_X\""}, "env": map[string]string{"SECRET_X": "there"}})
	infos, _ := s.Streams(ctx)
	if len(infos) != 1 || infos[0].Name != "sh" || infos[0].Size != -1 {
		t.Fatalf("streams %+v", infos)
	}
	r, err := s.Open(ctx, "sh")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if string(b) != "hello there" {
		t.Fatalf("got %q", b)
	}
}

func TestSourceFailureCarriesStderr(t *testing.T) {
	s := source(t, map[string]any{"command": []string{"sh", "-c", "echo partial; echo 'pg_dump: error: connection refused' >&2; exit 3"}, "name": "db.dump"})
	r, err := s.Open(ctx, "db.dump")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(r)
	err = r.Close()
	if err == nil || err.Error() != "sh exited with status 3: pg_dump: error: connection refused" {
		t.Fatalf("err = %v", err)
	}
}

// Closing early (a failed run) kills the command and its children.
func TestSourceCloseKillsTree(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	s := source(t, map[string]any{"command": []string{"sh", "-c", "sleep 60 & echo $! > " + pidFile + "; yes"}})
	r, _ := s.Open(ctx, "sh")
	buf := make([]byte, 10)
	io.ReadFull(r, buf)
	start := time.Now()
	r.Close()
	if time.Since(start) > 3*time.Second {
		t.Fatal("Close took too long")
	}
	b, _ := os.ReadFile(pidFile)
	pid := strings.TrimSpace(string(b))
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat("/proc/" + pid); err == nil {
		if st, _ := os.ReadFile("/proc/" + pid + "/stat"); !strings.Contains(string(st), ") Z") {
			t.Fatalf("child %s still runs", pid)
		}
	}
}

func TestSourceCancel(t *testing.T) {
	c, cancel := context.WithCancel(ctx)
	s := source(t, map[string]any{"command": []string{"sleep", "60"}})
	r, _ := s.Open(c, "sleep")
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	io.ReadAll(r)
	r.Close()
	if time.Since(start) > 5*time.Second {
		t.Fatal("cancel did not stop the command")
	}
}

func TestSink(t *testing.T) {
	dir := t.TempDir()
	s := sink(t, map[string]any{"command": []string{"sh", "-c", `cat > "$0/$PIPE_STREAM"`, dir}})
	w, err := s.Create(ctx, sdk.Object{Key: "k", Stream: "out.txt", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "data")
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "out.txt")); string(b) != "data" {
		t.Fatalf("got %q", b)
	}
}

func TestSinkFailure(t *testing.T) {
	s := sink(t, map[string]any{"command": []string{"sh", "-c", "head -c 10 >/dev/null; echo 'ERROR: relation exists' >&2; exit 1"}})
	w, _ := s.Create(ctx, sdk.Object{Key: "k", Stream: "s", Size: -1})
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		_, err = w.Write(make([]byte, 64<<10))
	}
	if err == nil {
		err = w.Commit(ctx)
	}
	if err == nil || !strings.Contains(err.Error(), "exited with status 1: ERROR: relation exists") {
		t.Fatalf("err = %v", err)
	}
	w.Abort(ctx)

	// A command that exits non-zero after reading everything fails Commit.
	s = sink(t, map[string]any{"command": []string{"sh", "-c", "cat >/dev/null; exit 2"}})
	w, _ = s.Create(ctx, sdk.Object{Key: "k", Stream: "s", Size: -1})
	w.Write([]byte("x"))
	if err := w.Commit(ctx); err == nil || !strings.Contains(err.Error(), "status 2") {
		t.Fatalf("err = %v", err)
	}
}

func TestSinkAbortKills(t *testing.T) {
	s := sink(t, map[string]any{"command": []string{"sleep", "60"}})
	w, _ := s.Create(ctx, sdk.Object{Key: "k", Stream: "s", Size: -1})
	start := time.Now()
	w.Abort(ctx)
	if time.Since(start) > 3*time.Second {
		t.Fatal("Abort did not stop the command")
	}
}

func TestConfigureErrors(t *testing.T) {
	for _, cmd := range [][]string{nil, {""}, {"no-such-program-xyz"}} {
		_, d := SourceType{}.Configure(ctx, sdk.NewConfig(map[string]any{"command": cmd}))
		if !d.HasErrors() || d[0].Attribute != "command" {
			t.Fatalf("%v: %+v", cmd, d)
		}
	}
}
