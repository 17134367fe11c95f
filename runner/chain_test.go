package runner_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/runner"
)

// chainRuns are two chains of a pipeline's runs, newest first: F2 ← I3,
// and F1 ← I1 ← I2 (each incremental names its parent).
func chainRuns() (*catalog.Catalog, map[string]*catalog.Run) {
	start := time.Date(2026, 11, 20, 2, 0, 0, 0, time.UTC)
	runs := []struct{ name, parent string }{{"F1", ""}, {"I1", "F1"}, {"I2", "I1"}, {"F2", ""}, {"I3", "F2"}}
	cat := &catalog.Catalog{}
	byName := map[string]*catalog.Run{}
	for i, r := range runs {
		at := start.Add(time.Duration(i) * 24 * time.Hour)
		m := &manifest.Manifest{RunID: r.name, Pipeline: "base", StartedAt: at, FinishedAt: at, Source: map[string]string{}}
		if r.parent != "" {
			m.Source[sdk.FactParent] = r.parent
		}
		cr := &catalog.Run{Key: r.name + "/pipe-manifest.json", Manifest: m}
		cat.Runs = append([]*catalog.Run{cr}, cat.Runs...)
		byName[r.name] = cr
	}
	return cat, byName
}

func TestCatalogChains(t *testing.T) {
	cat, runs := chainRuns()
	chain, err := cat.Chain(runs["I2"])
	if err != nil || names(chain) != "I2 I1 F1" {
		t.Errorf("the chain of I2: %s (%v)", names(chain), err)
	}
	if got := names(cat.Dependents("F1")); got != "I2 I1" {
		t.Errorf("the dependents of F1: %s", got)
	}
	if got := names(cat.Dependents("I2")); got != "" {
		t.Errorf("the dependents of I2: %s", got)
	}
	// I1 gone: I2's chain is broken, and says where.
	broken := &catalog.Catalog{Runs: slices.DeleteFunc(slices.Clone(cat.Runs), func(r *catalog.Run) bool { return r.Manifest.RunID == "I1" })}
	if _, err := broken.Chain(runs["I2"]); err == nil || !strings.Contains(err.Error(), "run I2 builds on run I1, which is not in the store") {
		t.Errorf("a chain without I1: %v", err)
	}
	if _, err := broken.Chain(runs["I2"]); err == nil {
		t.Error("no error")
	}
	// A partial parent breaks it too.
	runs["I1"].Manifest.Failed = []manifest.Failed{{Stream: "base.tar", Error: "x"}}
	if _, err := cat.Chain(runs["I2"]); err == nil || !strings.Contains(err.Error(), "is partial") {
		t.Errorf("a partial parent: %v", err)
	}
}

// TestRetentionKeepsParents: keep_last = 1 keeps the newest run and every
// run it builds on, and says why.
func TestRetentionKeepsParents(t *testing.T) {
	cat, runs := chainRuns()
	// The newest is I3 (on F2): F2 stays for it; the older chain goes.
	rp, err := runner.PlanRetention(cat, runner.Keep{Pipeline: "base", Rule: pipefile.Retention{Last: 1}}, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if names(rp.Keep) != "I3 F2" || names(rp.Drop) != "I2 I1 F1" {
		t.Errorf("kept %s, dropped %s", names(rp.Keep), names(rp.Drop))
	}
	if why := rp.Why[runs["F2"].Key]; !slices.Equal(why, []string{"run I3 builds on it"}) {
		t.Errorf("F2 is kept because %q", why)
	}
	// keep_within that reaches I2 alone keeps its whole chain.
	rp, err = runner.PlanRetention(cat, runner.Keep{Pipeline: "base", Rule: pipefile.Retention{Within: 60 * time.Hour}}, runs["I2"].Manifest.FinishedAt.Add(60*time.Hour-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if names(rp.Keep) != "I3 F2 I2 I1 F1" {
		t.Errorf("keep_within reaching I2: kept %s, dropped %s", names(rp.Keep), names(rp.Drop))
	}
}
