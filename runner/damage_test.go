package runner_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/runner"
)

// A source that read everything but found it damaged (a PostgreSQL page
// whose checksum failed): the run is stored whole with the damage in its
// manifest, the run fails (DamagedError) once stored, and retention does
// not run after it: the older run, which may hold the page intact, stays.
// The next good run stores and applies retention as usual, counting the
// damaged run as no complete run.
func TestDamagedRunIsStored(t *testing.T) {
	st := t.TempDir()
	backup := fmt.Sprintf(`
pipeline "base" {
  source "exec" { command = ["true"] }
  compress {}
  sink "fs" {
    path      = "%s/${run.id}/"
    keep_last = 1
  }
}`, st)
	good, err := runWith(t, backup, baseBackup{stopLSN: "0/2000100"}, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	damage := `checksum verification failed in file "./base/5/16397", block 3: calculated 9D3B but expected 1F2C; checksum verification failure during base backup`
	rep, err := runWith(t, backup, baseBackup{stopLSN: "0/3000100", damage: damage}, runner.Options{})
	var de *runner.DamagedError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "block 3") || rep.Damage != damage {
		t.Fatalf("a damaged run: %v (report's damage %q)", err, rep.Damage)
	}
	b, err := os.ReadFile(filepath.Join(st, rep.RunID, "pipe-manifest.json"))
	if err != nil {
		t.Fatalf("the damaged run has no manifest: %v", err)
	}
	m, err := manifest.Parse(b)
	if err != nil || !m.Damaged() || m.Damage != damage || m.Source["damage"] != "" || m.Source["stop_lsn"] != "0/3000100" {
		t.Fatalf("the damaged run's manifest: %+v, %v", m, err)
	}
	if _, err := os.Stat(filepath.Join(st, good.RunID, "pipe-manifest.json")); err != nil {
		t.Fatalf("retention ran after the damaged run: %v", err)
	}
	third, err := runWith(t, backup, baseBackup{stopLSN: "0/4000100"}, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := filepath.Glob(filepath.Join(st, "*", "pipe-manifest.json"))
	if len(runs) != 1 || !strings.Contains(runs[0], third.RunID) {
		t.Errorf("after a good run with keep_last = 1 the store holds %v", runs)
	}
}
