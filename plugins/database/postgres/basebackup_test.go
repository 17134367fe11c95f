package postgres

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// tarOf is a tar archive of files (name → content); names ending in /
// are folders.
func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, body := range files {
		h := &tar.Header{Name: name, Mode: 0o600, Size: int64(len(body)), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			h = &tar.Header{Name: name, Mode: 0o700, Typeflag: tar.TypeDir}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func baseSink(t *testing.T, vals map[string]any) *BaseSink {
	t.Helper()
	s, d := BaseSinkType{}.Configure(context.Background(), withDefaults(BaseSinkType{}.Schema(), sdk.NewConfig(vals)))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s.(*BaseSink)
}

func put(t *testing.T, s *BaseSink, stream string, data []byte) error {
	t.Helper()
	w, err := s.Create(context.Background(), sdk.Object{Key: stream, Stream: stream, Size: -1, MaxSize: -1})
	if err != nil {
		return err
	}
	if _, err := w.Write(data); err != nil {
		w.Abort(context.Background())
		return err
	}
	if err := w.Commit(context.Background()); err != nil {
		w.Abort(context.Background())
		return err
	}
	return nil
}

func TestBaseSinkRestoresAndSetsRecovery(t *testing.T) {
	ctx := context.Background()
	dd := filepath.Join(t.TempDir(), "data")
	s := baseSink(t, map[string]any{"data_directory": dd, "restore_command": "pipe wal fetch /etc/pipe/pg.hcl %f %p",
		"recovery_target_time": "2026-11-26 10:00:00+00", "recovery_target_action": "promote"})
	objs := []sdk.Object{{Key: "16385.tar", Stream: "16385.tar"}, {Key: "base.tar", Stream: "base.tar"}, {Key: "backup_manifest", Stream: "backup_manifest"}}
	if err := s.Prepare(ctx, objs); err != nil {
		t.Fatal(err)
	}
	if err := put(t, s, "16385.tar", tarOf(t, map[string]string{"PG_15_202209061/": "", "PG_15_202209061/5/16390": "rows"})); err != nil {
		t.Fatal(err)
	}
	base := tarOf(t, map[string]string{"PG_VERSION": "15\n", "global/": "", "global/pg_control": "control", "pg_tblspc/": "",
		"tablespace_map": "16385 /srv/ts\n", "postgresql.auto.conf": "# Do not edit\nwork_mem = '8MB'\n", "backup_label": "START WAL LOCATION"})
	if err := put(t, s, "base.tar", base); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dd, "global/pg_control")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pg_control is in place before the last archive: %v", err)
	}
	if err := put(t, s, "backup_manifest", []byte(`{"PostgreSQL-Backup-Manifest-Version": 1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"global/pg_control": "control", "pg_tblspc/16385/PG_15_202209061/5/16390": "rows", "recovery.signal": "", "backup_manifest": `{"PostgreSQL-Backup-Manifest-Version": 1}`} {
		if got, err := os.ReadFile(filepath.Join(dd, name)); err != nil || string(got) != want {
			t.Errorf("%s: %q %v, want %q", name, got, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dd, "tablespace_map")); !errors.Is(err, os.ErrNotExist) {
		t.Error("tablespace_map stayed: the server would link the tablespace to its old place")
	}
	conf, _ := os.ReadFile(filepath.Join(dd, "postgresql.auto.conf"))
	for _, line := range []string{"work_mem = '8MB'", "restore_command = 'pipe wal fetch /etc/pipe/pg.hcl %f %p'",
		"recovery_target_time = '2026-11-26 10:00:00+00'", "recovery_target_action = 'promote'", "recovery_target_timeline = 'latest'"} {
		if !strings.Contains(string(conf), line+"\n") {
			t.Errorf("postgresql.auto.conf lacks %q:\n%s", line, conf)
		}
	}
	if fi, err := os.Stat(dd); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the data directory's mode: %v %v", fi.Mode(), err)
	}
}

func TestBaseSinkRefusesAndCleansUp(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "PG_VERSION"), []byte("15"), 0o600)
	s := baseSink(t, map[string]any{"data_directory": dir, "restore_command": "pipe wal fetch f %f %p"})
	if err := s.Prepare(ctx, []sdk.Object{{Stream: "base.tar"}}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a data directory with files: %v", err)
	}
	dd := filepath.Join(t.TempDir(), "data")
	s = baseSink(t, map[string]any{"data_directory": dd, "restore_command": "pipe wal fetch f %f %p"})
	if err := s.Prepare(ctx, []sdk.Object{{Stream: "db.dump"}}); err == nil || !strings.Contains(err.Error(), "not part of a base backup") {
		t.Errorf("a logical dump's run: %v", err)
	}
	if err := s.Prepare(ctx, []sdk.Object{{Stream: "backup_manifest"}}); err == nil || !strings.Contains(err.Error(), "no base.tar") {
		t.Errorf("a run without base.tar: %v", err)
	}
	if err := s.Prepare(ctx, []sdk.Object{{Stream: "base.tar"}}); err != nil {
		t.Fatal(err)
	}
	// A damaged archive: the run fails, and the data directory is empty
	// again (and PostgreSQL never had a pg_control to start from).
	base := tarOf(t, map[string]string{"PG_VERSION": "15\n", "global/": "", "global/pg_control": strings.Repeat("c", 8192)})
	if err := put(t, s, "base.tar", base[:len(base)/2]); err == nil { // inside pg_control's bytes, whatever the order
		t.Error("a truncated base.tar was committed")
	}
	if entries, _ := os.ReadDir(dd); len(entries) != 0 {
		t.Errorf("a failed restore left %d entries in the data directory", len(entries))
	}
	// An entry that climbs out of the data directory.
	if err := put(t, s, "base.tar", tarOf(t, map[string]string{"../outside": "x"})); err == nil {
		t.Error("an entry outside the data directory was extracted")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(dd), "outside")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a file was written beside the data directory")
	}
}

func TestBaseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		vals map[string]any
		attr string
		text string
	}{
		{map[string]any{"data_directory": "d", "restore_command": "cp /a/%f"}, "restore_command", "%p"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "recovery_target_time": "2026-11-26 10:00"}, "recovery_target_time", "zone"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "recovery_target_lsn": "3000060"}, "recovery_target_lsn", "WAL position"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "recovery_target_lsn": "0/3000060", "recovery_target_name": "n"}, "", "at most one"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "recovery_target_action": "promote"}, "recovery_target_action", "without a target"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "recovery_target": "latest"}, "recovery_target", "immediate"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "recovery_target_timeline": "newest"}, "recovery_target_timeline", "latest"},
	} {
		_, d := BaseSinkType{}.Configure(context.Background(), withDefaults(BaseSinkType{}.Schema(), sdk.NewConfig(tc.vals)))
		if !d.HasErrors() || d[0].Attribute != tc.attr || !strings.Contains(d[0].Summary+d[0].Detail, tc.text) {
			t.Errorf("%v: %v, want an error on %q saying %q", tc.vals, d, tc.attr, tc.text)
		}
	}
	for _, tc := range []struct {
		vals map[string]any
		attr string
	}{
		{map[string]any{"host": "db", "checkpoint": "now"}, "checkpoint"},
		{map[string]any{"host": "db", "manifest_checksums": "MD5"}, "manifest_checksums"},
		{map[string]any{"host": "db", "label": "two\nlines"}, "label"},
	} {
		_, d := BaseSourceType{}.Configure(context.Background(), withDefaults(BaseSourceType{}.Schema(), sdk.NewConfig(tc.vals)))
		if !d.HasErrors() || d[0].Attribute != tc.attr {
			t.Errorf("%v: %v, want an error on %q", tc.vals, d, tc.attr)
		}
	}
	if err := (BaseSourceType{}).Schema().Validate(); err != nil {
		t.Error(err)
	}
	if err := (BaseSinkType{}).Schema().Validate(); err != nil {
		t.Error(err)
	}
}

func TestReplicationRefusalsSayWhatToDo(t *testing.T) {
	for msg, want := range map[string]string{
		`FATAL: no pg_hba.conf entry for replication connection from host "172.17.0.1", user "pipe"`: "host replication pipe",
		"FATAL: must be superuser or replication role to start walsender":                            "ALTER ROLE",
		"FATAL: number of requested standby connections exceeds max_wal_senders (currently 0)":       "raise max_wal_senders",
	} {
		if got := explainReplication("pipe", msg, errors.New(msg)).Error(); !strings.Contains(got, want) {
			t.Errorf("%s: %s, want %q", msg, got, want)
		}
	}
}
