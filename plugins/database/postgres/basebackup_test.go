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
		"tablespace_map": "16385 /srv/ts\n", "postgresql.auto.conf": "# Do not edit\nwork_mem = '8MB'\n", "backup_label": "START WAL LOCATION",
		"standby.signal": ""}) // taken from a standby
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
	// PostgreSQL accepts only links in pg_tblspc: the tablespace is in a
	// directory of its own, next to the data directory.
	ts := dd + "_tablespaces/16385"
	if link, err := os.Readlink(filepath.Join(dd, "pg_tblspc/16385")); err != nil || link != ts {
		t.Errorf("pg_tblspc/16385 is not a link to %s: %q %v", ts, link, err)
	}
	for _, dir := range []string{ts, filepath.Dir(ts)} {
		if fi, err := os.Stat(dir); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want 0700", dir, fi.Mode())
		}
	}
	if _, err := os.Stat(filepath.Join(dd, "standby.signal")); !errors.Is(err, os.ErrNotExist) {
		t.Error("standby.signal stayed: the server would stay a standby, and never recover to the target")
	}
	if _, err := os.Stat(filepath.Join(dd, "tablespace_map")); !errors.Is(err, os.ErrNotExist) {
		t.Error("tablespace_map stayed: the server would link the tablespace to its old place")
	}
	conf, _ := os.ReadFile(filepath.Join(dd, "postgresql.auto.conf"))
	for _, line := range []string{"work_mem = '8MB'", "restore_command = 'pipe wal fetch /etc/pipe/pg.hcl %f %p'",
		"recovery_target_time = '2026-11-26 10:00:00+00'", "recovery_target_action = 'promote'", "recovery_target_timeline = 'latest'", "archive_mode = 'off'"} {
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

// TestBaseSinkPlacesTablespaces restores tablespaces where tablespace_map
// and tablespace_map_all say, refuses a directory that holds anything
// before it writes a byte, and takes back what it made when the run
// fails, whenever it fails.
func TestBaseSinkPlacesTablespaces(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dd := filepath.Join(root, "data")
	objs := []sdk.Object{{Stream: "16385.tar"}, {Stream: "16386.tar"}, {Stream: "base.tar"}, {Stream: "backup_manifest"}}
	base := tarOf(t, map[string]string{"PG_VERSION": "15\n", "global/": "", "global/pg_control": "control", "pg_tblspc/": "",
		"tablespace_map": "16385 /srv/fast\n16386 /srv/a\\\nb\n", "postgresql.auto.conf": "archive_mode = 'on'\n"})
	space := tarOf(t, map[string]string{"PG_15_202209061/": "", "PG_15_202209061/5/16390": "rows"})
	big := tarOf(t, map[string]string{"PG_15_202209061/": "", "PG_15_202209061/5/16390": strings.Repeat("r", 8192)})
	cut := big[:len(big)/2] // inside the file's bytes, whatever the order
	vals := map[string]any{"data_directory": dd, "restore_command": "pipe wal fetch f %f %p",
		"tablespace_map": map[string]string{"16385": filepath.Join(root, "fast", "ts")}, "tablespace_map_all": filepath.Join(root, "spaces"), "archive_mode": "preserve"}

	// A directory that holds anything is refused before anything is made.
	os.MkdirAll(filepath.Join(root, "spaces", "16386"), 0o755)
	os.WriteFile(filepath.Join(root, "spaces", "16386", "PG_VERSION"), []byte("15"), 0o600)
	s := baseSink(t, vals)
	if err := s.Prepare(ctx, objs); err == nil || !strings.Contains(err.Error(), "tablespace 16386") || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a tablespace directory with files: %v", err)
	}
	if _, err := os.Stat(dd); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused restore made the data directory: %v", err)
	}
	os.Remove(filepath.Join(root, "spaces", "16386", "PG_VERSION")) // empty now: it is taken as it is

	// A mapping for a tablespace the run does not hold is a typo.
	if err := baseSink(t, map[string]any{"data_directory": dd, "restore_command": "x %f %p", "tablespace_map": map[string]string{"16999": "/x"}}).Prepare(ctx, objs); err == nil || !strings.Contains(err.Error(), "16385, 16386") {
		t.Errorf("a mapping of a tablespace the run lacks: %v", err)
	}

	s = baseSink(t, vals)
	if err := s.Prepare(ctx, objs); err != nil {
		t.Fatal(err)
	}
	// A tablespace that fails takes back the directories it made, and
	// leaves one it found empty.
	if err := put(t, s, "16385.tar", cut); err == nil {
		t.Error("a truncated tablespace archive was committed")
	}
	if _, err := os.Stat(filepath.Join(root, "fast")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a failed tablespace left the directories it made: %v", err)
	}
	if err := put(t, s, "16386.tar", cut); err == nil {
		t.Error("a truncated tablespace archive was committed")
	}
	if entries, err := os.ReadDir(filepath.Join(root, "spaces", "16386")); err != nil || len(entries) != 0 {
		t.Errorf("a failed tablespace in a directory that was there: %v %v, want it empty", entries, err)
	}

	// Then the whole run, the tablespaces before base.tar.
	for _, st := range []string{"16385.tar", "16386.tar"} {
		if err := put(t, s, st, space); err != nil {
			t.Fatal(err)
		}
	}
	if err := put(t, s, "base.tar", base); err != nil {
		t.Fatal(err)
	}
	if err := put(t, s, "backup_manifest", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for oid, dir := range map[string]string{"16385": filepath.Join(root, "fast", "ts"), "16386": filepath.Join(root, "spaces", "16386")} {
		if link, err := os.Readlink(filepath.Join(dd, "pg_tblspc", oid)); err != nil || link != dir {
			t.Errorf("pg_tblspc/%s: %q %v, want a link to %s", oid, link, err, dir)
		}
		if got, err := os.ReadFile(filepath.Join(dir, "PG_15_202209061/5/16390")); err != nil || string(got) != "rows" {
			t.Errorf("tablespace %s: %q %v", oid, got, err)
		}
	}
	if conf, _ := os.ReadFile(filepath.Join(dd, "postgresql.auto.conf")); strings.Contains(string(conf), "archive_mode = 'off'") {
		t.Errorf("archive_mode = \"preserve\" wrote archive_mode = 'off':\n%s", conf)
	}

	// A run that fails after its archives committed (the host takes each
	// back) leaves nothing: no file, no link, no directory pipe made.
	rm, ok := any(s).(sdk.Remover)
	if !ok {
		t.Fatal("the sink cannot take back the archives of a run that failed after they committed")
	}
	for _, st := range []string{"16385.tar", "16386.tar", "base.tar", "backup_manifest"} {
		if err := rm.Remove(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	if entries, _ := os.ReadDir(dd); len(entries) != 0 {
		t.Errorf("taking the run back left %d entries in the data directory", len(entries))
	}
	if _, err := os.Stat(filepath.Join(root, "fast")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("taking the run back left the directories it made: %v", err)
	}
	if entries, err := os.ReadDir(filepath.Join(root, "spaces", "16386")); err != nil || len(entries) != 0 {
		t.Errorf("taking the run back: %v %v, want the directory that was there, empty", entries, err)
	}
}

// TestBaseSinkNeedsEveryTablespace refuses to finish a restore whose
// base.tar names a tablespace the run did not bring.
func TestBaseSinkNeedsEveryTablespace(t *testing.T) {
	ctx := context.Background()
	dd := filepath.Join(t.TempDir(), "data")
	s := baseSink(t, map[string]any{"data_directory": dd, "restore_command": "x %f %p"})
	if err := s.Prepare(ctx, []sdk.Object{{Stream: "base.tar"}}); err != nil {
		t.Fatal(err)
	}
	if err := put(t, s, "base.tar", tarOf(t, map[string]string{"global/": "", "global/pg_control": "c", "tablespace_map": "16385 /srv/ts\n"})); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err == nil || !strings.Contains(err.Error(), "16385.tar") {
		t.Errorf("a restore without a tablespace base.tar names: %v", err)
	}
}

func TestTablespaceMapOIDs(t *testing.T) {
	got := strings.Join(tablespaceMapOIDs([]byte("16385 /srv/ts\n16386 /srv/odd\\\n17000 not an entry\n16387 /x\\\\\n")), ",")
	if got != "16385,16386,16387" {
		t.Errorf("tablespace_map OIDs: %s", got)
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
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "archive_mode": "on"}, "archive_mode", "preserve"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "tablespace_map_all": "d/spaces"}, "tablespace_map_all", "outside"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "tablespace_map": map[string]string{"fast": "/srv/ts"}}, "tablespace_map", "OID"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "tablespace_map": map[string]string{"16385": "d/pg_tblspc/16385"}}, "tablespace_map", "outside"},
		{map[string]any{"data_directory": "d", "restore_command": "x %f %p", "tablespace_map": map[string]string{"16385": "/srv/ts", "16386": "/srv/ts/b"}}, "tablespace_map", "of its own"},
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
