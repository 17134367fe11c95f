package runner_test

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/manifest"
)

func runDirs(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() { // the runs (the store's index sits beside them)
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out
}

// fakeRun writes a run folder as another pipe run would have: an object
// and, unless failed, a manifest that finished at the given time.
func fakeRun(t *testing.T, root, pipeline string, at time.Time, failed bool) string {
	t.Helper()
	id := at.UTC().Format("20060102T150405Z") + "-abcdef"
	dir := filepath.Join(root, id)
	os.MkdirAll(dir, 0o700)
	os.WriteFile(filepath.Join(dir, "a.zst"), []byte("old"), 0o600)
	if !failed {
		m := &manifest.Manifest{RunID: id, Pipeline: pipeline, StartedAt: at, FinishedAt: at,
			Objects: []manifest.Object{{Stream: "a", Key: "a.zst", Size: 3, Codec: "zstd", Digest: "sha256:" + fmt.Sprintf("%x", sha256.Sum256([]byte("old")))}}}
		b, _ := m.Marshal()
		os.WriteFile(filepath.Join(dir, "pipe-manifest.json"), b, 0o600)
	}
	return id
}

func TestRetention(t *testing.T) {
	dir := t.TempDir()
	in, st := filepath.Join(dir, "in"), filepath.Join(dir, "st")
	os.MkdirAll(in, 0o755)
	os.WriteFile(filepath.Join(in, "a"), []byte("data"), 0o644)
	src := fmt.Sprintf(`
pipeline "nightly" {
  source "fs" { path = %q }
  compress {}
  checksum {}
  sink "fs" {
    path      = "%s/${pipeline.name}/${run.id}/"
    keep_last = 2
  }
}`, in, st)
	root := filepath.Join(st, "nightly")
	var kept []string
	for i := 0; i < 4; i++ {
		rep := run(t, src, "nightly")
		kept = append(kept, rep.RunID)
		if len(rep.Retention) != 1 || rep.Retention[0].Error != "" {
			t.Fatalf("run %d: retention %+v", i, rep.Retention)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := runDirs(t, root)
	want := []string{kept[2], kept[3]}
	sort.Strings(want)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("after 4 runs with keep_last = 2: %v, want %v", got, want)
	}

	// keep_within: an old run goes, and so do the leftovers of an old failed
	// run; a recent failed run may still be writing and stays; another
	// pipeline's runs under the same folder are not this pipeline's to drop.
	now := time.Now()
	old := fakeRun(t, root, "nightly", now.Add(-72*time.Hour), false)
	oldFailed := fakeRun(t, root, "nightly", now.Add(-48*time.Hour), true)
	recentFailed := fakeRun(t, root, "nightly", now.Add(-time.Hour), true)
	other := fakeRun(t, root, "weekly", now.Add(-96*time.Hour), false)
	src = strings.Replace(src, "keep_last = 2", `keep_within = "1d"`, 1)
	rep := run(t, src, "nightly")
	got = runDirs(t, root)
	if contains(got, old) {
		t.Errorf("run %s is older than 1d but was kept: %v", old, got)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, oldFailed)); len(entries) != 0 {
		t.Errorf("leftovers of the failed run %s were kept", oldFailed)
	}
	for _, stay := range []string{recentFailed, other, rep.RunID, kept[2], kept[3]} {
		if !contains(got, stay) {
			t.Errorf("%s was deleted: %v", stay, got)
		}
	}
	if r := rep.Retention[0]; len(r.DeletedRuns) != 1 || r.DeletedRuns[0] != old || r.Garbage != 1 {
		t.Errorf("report %+v", r)
	}
}

func contains(s []string, x string) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
