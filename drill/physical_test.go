package drill

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestScratch(t *testing.T) {
	sc, err := NewScratch(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]any{"data_directory": "/var/lib/postgresql/15/main", "restore_command": "pipe wal fetch x %f %p",
		"recovery_target_time": "2026-11-26 09:59:00+00", "recovery_target_action": "pause", "recovery_target_inclusive": true, "tablespace_map_all": "/srv/ts"}
	sc.Connect(vals)
	if vals["data_directory"] != sc.Data || vals["restore_command"] != "cp "+sc.WAL+"/%f %p" || vals["recovery_target_timeline"] != "latest" || vals["recovery_target_inclusive"] != true {
		t.Errorf("connected: %v", vals)
	}
	for _, k := range []string{"recovery_target_time", "recovery_target_action", "tablespace_map_all"} {
		if _, ok := vals[k]; ok {
			t.Errorf("%s stayed: the drill recovers to the end of the archive, its tablespaces in its folder", k)
		}
	}
	if _, err := sc.StartSegment(); err == nil {
		t.Error("a start segment without a backup_label")
	}
	os.MkdirAll(sc.Data, 0o700)
	label := "START WAL LOCATION: 0/9000028 (file 000000010000000000000009)\nCHECKPOINT LOCATION: 0/9000060\n"
	os.WriteFile(filepath.Join(sc.Data, "backup_label"), []byte(label), 0o600)
	if seg, err := sc.StartSegment(); err != nil || seg != "000000010000000000000009" {
		t.Errorf("start segment %q, %v", seg, err)
	}
	os.WriteFile(filepath.Join(sc.Data, "postgresql.conf"), []byte("port = 5433\n"), 0o600)
	if err := ensureConfig(sc.Data); err != nil {
		t.Fatal(err)
	}
	conf, _ := os.ReadFile(filepath.Join(sc.Data, "postgresql.conf"))
	hba, _ := os.ReadFile(filepath.Join(sc.Data, "pg_hba.conf"))
	if string(conf) != "port = 5433\n" || !strings.Contains(string(hba), "local all all trust") {
		t.Errorf("postgresql.conf %q (kept), pg_hba.conf %q (made)", conf, hba)
	}
	sc.Discard()
	if _, err := os.Stat(sc.Dir); !os.IsNotExist(err) {
		t.Errorf("the scratch folder stayed: %v", err)
	}
}
