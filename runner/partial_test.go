package runner_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
)

// cluster is a source of databases that stand alone; the ones in fail
// break after a few bytes.
type cluster struct {
	dbs         []string
	fail        map[string]bool
	independent bool
}

func (c *cluster) Streams(context.Context) ([]sdk.StreamInfo, error) {
	var out []sdk.StreamInfo
	for _, d := range c.dbs {
		out = append(out, sdk.StreamInfo{Name: d + ".dump", Size: -1})
	}
	return out, nil
}

func (c *cluster) Open(_ context.Context, name string) (io.ReadCloser, error) {
	data := bytes.Repeat([]byte(name), 1000)
	if c.fail[strings.TrimSuffix(name, ".dump")] {
		return io.NopCloser(io.MultiReader(bytes.NewReader(data[:100]), errReader{fmt.Errorf("pg_dump: error: permission denied for database\n%q", name)})), nil
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (c *cluster) Independent() bool { return c.independent }

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// runCluster backs src up into st with keep_last = 1.
func runCluster(t *testing.T, src sdk.Source, st string) (*runner.Report, error) {
	t.Helper()
	return runClusterKeep(t, src, st, 1)
}

// runClusterKeep backs src up into st with keep_last = keep.
func runClusterKeep(t *testing.T, src sdk.Source, st string, keep int) (*runner.Report, error) {
	t.Helper()
	return runFile(t, fmt.Sprintf(`
pipeline "cluster" {
  source "exec" { command = ["true"] }
  compress {}
  checksum {}
  sink "fs" {
    path      = "%s/${run.id}/"
    keep_last = %d
  }
}`, st, keep), src)
}

// runFile runs the only pipeline of hcl, reading src instead of its
// source when src is set.
func runFile(t *testing.T, hcl string, src sdk.Source) (*runner.Report, error) {
	t.Helper()
	reg, err := host.NewRegistry(all.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	runID := fmt.Sprintf("%s-%06d", time.Now().UTC().Format("20060102T150405Z"), time.Now().Nanosecond()/1000)
	f, diags := pipefile.LoadSource("t.hcl", []byte(hcl), pipefile.Options{RunID: runID, Schemas: reg})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	pl, diags := plan.New(f, plan.Options{Host: profiles.Host{CPUs: 2, Memory: 8 << 30}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return runner.Run(context.Background(), pl.Pipelines[0], runner.Options{RunID: runID, Registry: reg, Source: src,
		Scrub: func(s string) string { return strings.ReplaceAll(s, "permission", "(sensitive)") }})
}

// A cluster's database that fails does not stop the others: they are
// stored under a manifest that names the failed one, the run fails, and
// retention does not let the partial run replace a complete one.
func TestPartialRun(t *testing.T) {
	st := t.TempDir()
	full := &cluster{dbs: []string{"shop", "billing", "crm"}, independent: true}
	rep, err := runCluster(t, full, st)
	if err != nil {
		t.Fatal(err)
	}
	complete := rep.RunID
	time.Sleep(10 * time.Millisecond)

	partial := &cluster{dbs: []string{"shop", "billing", "crm"}, fail: map[string]bool{"billing": true}, independent: true}
	rep, err = runCluster(t, partial, st)
	var pe *runner.PartialError
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0].Stream != "billing.dump" || pe.Stored != 2 {
		t.Fatalf("err = %v, want billing.dump failed and 2 stored", err)
	}
	if !strings.Contains(err.Error(), "1 of 3 streams failed") || !strings.Contains(err.Error(), "billing.dump: ") {
		t.Errorf("the error does not say what failed: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(st, rep.RunID, "pipe-manifest.json"))
	if err != nil {
		t.Fatalf("no manifest for the partial run: %v", err)
	}
	m, err := manifest.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	var stored []string
	for _, o := range m.Objects {
		stored = append(stored, o.Stream)
	}
	if strings.Join(stored, " ") != "shop.dump crm.dump" || len(m.Failed) != 1 || m.Failed[0].Stream != "billing.dump" || !m.Independent {
		t.Fatalf("manifest holds %v, failed %+v", stored, m.Failed)
	}
	if e := m.Failed[0].Error; strings.Contains(e, "\n") || strings.Contains(e, "permission") || !strings.Contains(e, "pg_dump: error") {
		t.Errorf("the recorded error is not one scrubbed line: %q", e)
	}
	if _, err := os.Stat(filepath.Join(st, rep.RunID, "billing.dump.zst")); err == nil {
		t.Error("the failed stream's object is stored")
	}
	// keep_last = 1: the partial run ran no retention, and the complete
	// run stays beside it.
	if got := runDirs(t, st); len(got) != 2 || got[0] != complete {
		t.Fatalf("runs %v, want the complete run %s kept beside the partial one", got, complete)
	}
	// The next complete run keeps itself only: the partial run is older.
	time.Sleep(10 * time.Millisecond)
	if rep, err = runCluster(t, full, st); err != nil {
		t.Fatal(err)
	}
	if got := runDirs(t, st); len(got) != 1 || got[0] != rep.RunID {
		t.Fatalf("runs %v, want only %s", got, rep.RunID)
	}

	// Every database failed: nothing is stored, no manifest.
	none := &cluster{dbs: []string{"a", "b"}, fail: map[string]bool{"a": true, "b": true}, independent: true}
	rep, err = runCluster(t, none, st)
	if err == nil || errors.As(err, &pe) {
		t.Fatalf("err = %v, want the run to fail", err)
	}
	if _, serr := os.Stat(filepath.Join(st, rep.RunID)); serr == nil {
		if ents, _ := os.ReadDir(filepath.Join(st, rep.RunID)); len(ents) > 0 {
			t.Errorf("a run that stored nothing left %d files", len(ents))
		}
	}

	// Streams that do not stand alone: the first failure fails the run.
	dependent := &cluster{dbs: []string{"shop", "billing"}, fail: map[string]bool{"billing": true}}
	if _, err = runCluster(t, dependent, st); err == nil || errors.As(err, &pe) {
		t.Fatalf("err = %v, want the whole run to fail", err)
	}
}

// A partial run is kept while it is newer than the complete runs kept,
// but it never counts as one of them: with keep_last = 2, a complete
// run, a partial one and a complete one keep all three.
func TestRetentionSkipsPartialRuns(t *testing.T) {
	st := t.TempDir()
	full := &cluster{dbs: []string{"shop"}, independent: true}
	var ids []string
	for _, c := range []*cluster{full, {dbs: []string{"shop", "x"}, fail: map[string]bool{"x": true}, independent: true}, full} {
		rep, err := runClusterKeep(t, c, st, 2)
		if c == full && err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rep.RunID)
		time.Sleep(10 * time.Millisecond)
	}
	if got := runDirs(t, st); strings.Join(got, " ") != strings.Join(ids, " ") {
		t.Fatalf("after complete, partial, complete with keep_last = 2: %v, want all of %v", got, ids)
	}
	rep, err := runClusterKeep(t, full, st, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := runDirs(t, st); strings.Join(got, " ") != ids[2]+" "+rep.RunID {
		t.Fatalf("after one more complete run: %v, want %s %s", got, ids[2], rep.RunID)
	}
}

// A restore of a cluster's run goes on past a database that fails (here
// an object changed in the store): the others are restored, and the
// error names the one that was not.
func TestPartialRestore(t *testing.T) {
	dir := t.TempDir()
	st, out := filepath.Join(dir, "st"), filepath.Join(dir, "out")
	rep, err := runCluster(t, &cluster{dbs: []string{"shop", "billing", "crm"}, independent: true}, st)
	if err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(st, rep.RunID, "billing.dump.zst")
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(obj, b, 0o600); err != nil {
		t.Fatal(err)
	}
	restore := fmt.Sprintf(`
pipeline "restore" {
  source "fs" { path = "%s/" }
  decompress {}
  sink "fs" { path = "%s/" }
}`, st, out)
	_, err = runFile(t, restore, nil)
	var pe *runner.PartialError
	if !errors.As(err, &pe) || len(pe.Failed) != 1 || pe.Failed[0].Stream != "billing.dump" || pe.Stored != 2 {
		t.Fatalf("err = %v, want billing.dump failed and 2 restored", err)
	}
	for _, db := range []string{"shop", "crm"} {
		got, err := os.ReadFile(filepath.Join(out, db+".dump"))
		if want := bytes.Repeat([]byte(db+".dump"), 1000); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes restored (%v)", db, len(got), err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "billing.dump")); err == nil {
		t.Error("the changed object was restored")
	}
}
