package runner_test

import (
	"archive/tar"
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

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
)

// baseBackup is a PostgreSQL base backup as the postgres_basebackup
// source yields it: base.tar and backup_manifest, and the facts of where
// it started and ended in the WAL.
type baseBackup struct{ stopLSN, damage string }

func (baseBackup) Streams(context.Context) ([]sdk.StreamInfo, error) {
	return []sdk.StreamInfo{{Name: "base.tar", Size: -1}, {Name: "backup_manifest", Size: -1}}, nil
}

func (baseBackup) Open(_ context.Context, name string) (io.ReadCloser, error) {
	if name == "backup_manifest" {
		return io.NopCloser(strings.NewReader("{}")), nil
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range [][2]string{{"PG_VERSION", "15\n"}, {"global/pg_control", "control"}} {
		tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o600, Size: int64(len(f[1])), Typeflag: tar.TypeReg})
		tw.Write([]byte(f[1]))
	}
	tw.Close()
	return io.NopCloser(&b), nil
}

func (baseBackup) Describe(context.Context) (map[string]string, error) {
	return map[string]string{"system_identifier": "7301234567890123456", "timeline": "1", "start_lsn": "0/2000028", "wal_segment_size": "16777216"}, nil
}

func (b baseBackup) Conclude(context.Context) (map[string]string, error) {
	facts := map[string]string{"stop_lsn": b.stopLSN, "stop_timeline": "1", "stop_time": time.Now().UTC().Format(time.RFC3339Nano)}
	if b.damage != "" {
		facts[sdk.FactDamage] = b.damage
	}
	return facts, nil
}

// runWith runs the only pipeline of hcl with o (its registry and run id
// filled in), reading src instead of its source when src is set.
func runWith(t *testing.T, hcl string, src sdk.Source, o runner.Options) (*runner.Report, error) {
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
	o.RunID, o.Registry, o.Source = runID, reg, src
	return runner.Run(context.Background(), pl.Pipelines[0], o)
}

// TestRestoreReachesTheTarget: a restore that recovers to a point (the
// postgres_basebackup sink's recovery_target_time or _lsn) reads a base
// backup that ended before it; a run named (--run, --before, run =) that
// ended after it is refused before anything is written, naming the
// newest run that can reach it. Restored, the later run would be
// extracted, and PostgreSQL would refuse to start: "requested recovery
// stop point is before consistent recovery point".
func TestRestoreReachesTheTarget(t *testing.T) {
	st := t.TempDir()
	backup := fmt.Sprintf(`
pipeline "base" {
  source "exec" { command = ["true"] }
  compress {}
  sink "fs" { path = "%s/${run.id}/" }
}`, st)
	first, err := runWith(t, backup, baseBackup{stopLSN: "0/2000100"}, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	between := time.Now().UTC()
	time.Sleep(20 * time.Millisecond)
	second, err := runWith(t, backup, baseBackup{stopLSN: "0/5000100"}, runner.Options{})
	if err != nil {
		t.Fatal(err)
	}
	restore := func(target string, sel catalog.Selection) (string, error) {
		dd := filepath.Join(t.TempDir(), "data")
		_, err := runWith(t, fmt.Sprintf(`
pipeline "pitr" {
  source "fs" { path = "%s/" }
  decompress {}
  sink "postgres_basebackup" {
    data_directory  = "%s"
    restore_command = "pipe wal fetch /etc/pipe/pg.hcl %%f %%p"
    %s
  }
}`, st, dd, target), nil, runner.Options{Select: sel})
		if err != nil {
			if _, serr := os.Stat(dd); !errors.Is(serr, os.ErrNotExist) {
				t.Errorf("a refused restore (%v) made the data directory: %v", err, serr)
			}
			return "", err
		}
		return dd, nil
	}
	atTime := fmt.Sprintf("recovery_target_time = %q", between.Format(time.RFC3339Nano))
	atLSN := `recovery_target_lsn = "0/3000000"`
	for _, tc := range []struct {
		name   string
		target string
		sel    catalog.Selection
		want   string // "" for a restore that succeeds
	}{
		{"time, the run chosen", atTime, catalog.Selection{}, ""},
		{"lsn, the run chosen", atLSN, catalog.Selection{}, ""},
		{"time, --run after it", atTime, catalog.Selection{RunID: second.RunID}, "restore run " + first.RunID + ", the newest that can"},
		{"lsn, --run after it", atLSN, catalog.Selection{RunID: second.RunID}, "it ended at WAL position 0/5000100, after the target"},
		{"lsn, --before after it", atLSN, catalog.Selection{Before: time.Now()}, "restore run " + first.RunID},
		{"lsn, before every run", `recovery_target_lsn = "0/1000000"`, catalog.Selection{}, "no complete run can be recovered to recovery_target_lsn"},
		{"lsn, --run that reaches it", atLSN, catalog.Selection{RunID: first.RunID}, ""},
	} {
		dd, err := restore(tc.target, tc.sel)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		case tc.want == "":
			// The run restored is the first: recovery can reach the target.
			if _, err := os.Stat(filepath.Join(dd, "global", "pg_control")); err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
		}
	}
	// A source that names the later run's manifest on purpose.
	_, err = runWith(t, fmt.Sprintf(`
pipeline "pitr" {
  source "fs" { path = "%s/%s/pipe-manifest.json" }
  decompress {}
  sink "postgres_basebackup" {
    data_directory      = "%s"
    restore_command     = "pipe wal fetch /etc/pipe/pg.hcl %%f %%p"
    recovery_target_lsn = "0/3000000"
  }
}`, st, second.RunID, filepath.Join(t.TempDir(), "data")), nil, runner.Options{})
	if err == nil || !strings.Contains(err.Error(), "names run "+second.RunID+", which cannot be recovered to recovery_target_lsn") {
		t.Errorf("a source naming the later run's manifest: %v", err)
	}
	// The run restored by default with an LSN target is the one that
	// ended before it, not the newest.
	rep, err := runWith(t, fmt.Sprintf(`
pipeline "pitr" {
  source "fs" { path = "%s/" }
  decompress {}
  sink "postgres_basebackup" {
    data_directory      = "%s"
    restore_command     = "pipe wal fetch /etc/pipe/pg.hcl %%f %%p"
    recovery_target_lsn = "0/3000000"
  }
}`, st, filepath.Join(t.TempDir(), "data")), nil, runner.Options{})
	if err != nil || !strings.Contains(rep.ManifestRead, first.RunID) {
		t.Errorf("restored %s (%v), want run %s", rep.ManifestRead, err, first.RunID)
	}
}
