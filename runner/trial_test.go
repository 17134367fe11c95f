package runner_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
	"github.com/pipebackup/pipe/synthetic"
)

// trial plans src and runs its only pipeline as a trial.
func trial(t *testing.T, src string, source sdk.Source) (*runner.Report, error) {
	t.Helper()
	reg, err := host.NewRegistry(all.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	f, diags := pipefile.LoadSource("test.hcl", []byte(src), pipefile.Options{RunID: "trial-1", Schemas: reg})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	pl, diags := plan.New(f, plan.Options{Host: profiles.Host{CPUs: 2, Memory: 8 << 30}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return runner.Run(ctx, pl.Pipelines[0], runner.Options{RunID: "trial-1", Registry: reg, Trial: true, Source: source})
}

// files lists the files under dir.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	return out
}

// A trial moves every byte, then leaves nothing: no object, no manifest.
func TestTrialLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	in, st := filepath.Join(dir, "in"), filepath.Join(dir, "st")
	os.MkdirAll(in, 0o755)
	os.WriteFile(filepath.Join(in, "a.sql"), []byte(strings.Repeat("insert into t values (1, 'x');\n", 40000)), 0o644)
	os.WriteFile(filepath.Join(in, "b.sql"), []byte(strings.Repeat("y", 300000)), 0o644)
	rep, err := trial(t, `pipeline "p" {
  source "fs" { path = "`+in+`" }
  compress {}
  checksum {}
  sink "fs" {
    path      = "`+st+`/${run.id}/"
    keep_last = 1
  }
}`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var read int64
	for _, s := range rep.Result.Streams {
		read += s.Read
	}
	if read != 40000*31+300000 || rep.Streams != 2 {
		t.Fatalf("the trial read %d bytes in %d streams, want %d in 2", read, rep.Streams, 40000*31+300000)
	}
	if len(rep.Manifests) != 0 || len(rep.Retention) != 0 {
		t.Errorf("the trial wrote manifests %v or applied retention %v", rep.Manifests, rep.Retention)
	}
	if left := files(t, st); len(left) != 0 {
		t.Fatalf("the trial left %v", left)
	}
}

// An in-process source replaces the file's.
func TestTrialSourceOverride(t *testing.T) {
	st := filepath.Join(t.TempDir(), "st")
	rep, err := trial(t, `pipeline "p" {
  source "fs" { path = "/nonexistent" }
  compress {}
  sink "fs" { path = "`+st+`/" }
}`, synthetic.New(2, 100000))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Streams != 2 || rep.Result.Streams[1].Read != 100000 || rep.Result.Streams[1].Written >= 100000 {
		t.Fatalf("streams %d, second read %d and stored %d bytes; want 2 streams of 100000 compressed", rep.Streams, rep.Result.Streams[1].Read, rep.Result.Streams[1].Written)
	}
	if left := files(t, st); len(left) != 0 {
		t.Fatalf("the trial left %v", left)
	}
}

// A trial never replaces an object that exists (taking it back would
// delete a real backup).
func TestTrialRefusesExistingKey(t *testing.T) {
	st := filepath.Join(t.TempDir(), "st")
	os.MkdirAll(st, 0o755)
	real := filepath.Join(st, "synthetic-001.sql.zst")
	os.WriteFile(real, []byte("a real backup"), 0o644)
	_, err := trial(t, `pipeline "p" {
  source "fs" { path = "/nonexistent" }
  compress {}
  sink "fs" { path = "`+st+`/" }
}`, synthetic.New(1, 1000))
	if err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("err = %v, want a refusal of the existing key", err)
	}
	if b, _ := os.ReadFile(real); string(b) != "a real backup" {
		t.Fatalf("the existing object now holds %q", b)
	}
}

func TestTrialRefusals(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("x"), 0o644)
	_, err := trial(t, `pipeline "p" {
  source "fs" { path = "`+dir+`" }
  sink "exec" { command = ["true"] }
}`, nil)
	if err == nil || !strings.Contains(err.Error(), "cannot") {
		t.Errorf("a trial into a command: err = %v, want a refusal", err)
	}
	_, err = trial(t, `pipeline "p" {
  source "fs" { path = "`+dir+`" }
  decompress { codec = "none" }
  sink "fs" { path = "`+filepath.Join(dir, "out")+`/" }
}`, nil)
	if err == nil || !strings.Contains(err.Error(), "restores") {
		t.Errorf("a trial restore: err = %v, want a refusal", err)
	}
}
