package mysql

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/internal/binlogfile"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// TestPhysicalDecides: an incremental builds only on a backup of this
// server whose log position the server has passed, as the policy allows.
func TestPhysicalDecides(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	server := map[string]string{factHostname: "db1", factServerID: "1", factDataDir: "/var/lib/mysql/"}
	parent := func(more map[string]string) *sdk.Parent {
		f := map[string]string{factHostname: "db1", factServerID: "1", factDataDir: "/var/lib/mysql/", factToLSN: "5000",
			sdk.FactBackupType: sdk.BackupFull, sdk.FactStopTime: now.Add(-time.Hour).Format(time.RFC3339Nano)}
		for k, v := range more {
			f[k] = v
		}
		return &sdk.Parent{RunID: "R1", Facts: f}
	}
	c := physicalConfig{ChainPolicy: sdk.ChainPolicy{Incremental: true, FullEvery: 3}}
	for _, tc := range []struct {
		name   string
		c      physicalConfig
		parent *sdk.Parent
		lsn    int64
		why    string // "" builds on the parent, "-" a full without a reason
	}{
		{"builds on the parent", c, parent(nil), 6000, ""},
		{"the log did not move", c, parent(nil), 5000, ""},
		{"the server does not say", c, parent(nil), -1, ""},
		{"not asked", physicalConfig{ChainPolicy: sdk.ChainPolicy{FullEvery: 3}}, parent(nil), 6000, "-"},
		{"no parent", c, nil, 6000, "there is no run to build on: none here"},
		{"a logical dump", c, parent(map[string]string{factToLSN: ""}), 6000, "records no InnoDB log position"},
		{"another host", c, parent(map[string]string{factHostname: "db2"}), 6000, `of another server (hostname "db2"`},
		{"another server_id", c, parent(map[string]string{factServerID: "2"}), 6000, "server_id"},
		{"another data directory", c, parent(map[string]string{factDataDir: "/srv/mysql/"}), 6000, "data_directory"},
		{"restored since", c, parent(nil), 4000, "behind the newest run's 5000"},
		{"full_every", c, parent(map[string]string{sdk.FactBackupType: sdk.BackupIncremental, sdk.FactChainLength: "2"}), 6000, "full_every = 3"},
	} {
		p := tc.c.decide(tc.parent, "none here", server, tc.lsn, now)
		switch {
		case tc.why == "" && (p.Parent == nil || p.Why != ""):
			t.Errorf("%s: a full (%q), want an incremental", tc.name, p.Why)
		case tc.why == "-" && (p.Parent != nil || p.Why != ""):
			t.Errorf("%s: %+v, want a full without a reason", tc.name, p)
		case tc.why != "" && tc.why != "-" && (p.Parent != nil || !strings.Contains(p.Why, tc.why)):
			t.Errorf("%s: parent %v, why %q; want a full because %q", tc.name, p.Parent != nil, p.Why, tc.why)
		}
	}
}

// TestReadInfo reads both names mariadb-backup gives its files, and the
// binlog position in each form.
func TestReadInfo(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "mariadb_backup_checkpoints"), []byte("backup_type = incremental\nfrom_lsn = 44760\nto_lsn = 48000\n"), 0o600)
	os.WriteFile(filepath.Join(dir, "xtrabackup_info"), []byte("tool_name = mariadb-backup\nbinlog_pos = filename 'mysql-bin.000002', position '855', GTID of the last change '0-1-3,1-2-9'\n"), 0o600)
	p, err := readInfo(dir, "checkpoints")
	if err != nil || p["backup_type"] != "incremental" || p["from_lsn"] != "44760" || p["to_lsn"] != "48000" {
		t.Fatalf("checkpoints: %v, %v", p, err)
	}
	i, err := readInfo(dir, "info")
	if err != nil {
		t.Fatal(err)
	}
	m := binlogPos.FindStringSubmatch(i["binlog_pos"])
	if m == nil || m[1] != "mysql-bin.000002" || m[2] != "855" || m[3] != "0-1-3,1-2-9" {
		t.Fatalf("binlog_pos %q: %q", i["binlog_pos"], m)
	}
	if m := binlogPos.FindStringSubmatch("filename 'mysql-bin.000007', position '4'"); m == nil || m[3] != "" {
		t.Fatalf("a position without GTID: %q", m)
	}
	if _, err := readInfo(dir, "binlog_info"); err == nil {
		t.Fatal("a missing file was read")
	}
}

// TestReplayTarget: a time target takes every event of its second and
// none after; a GTID target stops at its transaction of its domain.
func TestReplayTarget(t *testing.T) {
	at, _ := sdk.ParsePointInTime("2026-11-29 10:00:00.5+00")
	tt := replayTarget{at: at}
	sec := uint32(at.Unix())
	if tt.reached(binlogfile.Event{Timestamp: sec}) || !tt.reached(binlogfile.Event{Timestamp: sec + 1}) {
		t.Error("a time target must replay its whole second and stop after it")
	}
	dom, seq, err := parseGTID("2-1-4711")
	if err != nil || dom != 2 || seq != 4711 {
		t.Fatalf("parseGTID: %d %d %v", dom, seq, err)
	}
	g := replayTarget{gtid: "2-1-4711", domain: 2, seq: 4711}
	for _, c := range []struct {
		e    binlogfile.Event
		want bool
	}{
		{binlogfile.Event{Type: binlogfile.GTIDEvent, Domain: 2, Seq: 4710}, false},
		{binlogfile.Event{Type: binlogfile.GTIDEvent, Domain: 0, Seq: 9000}, false},
		{binlogfile.Event{Type: 2, Domain: 2, Seq: 5000}, false},
		{binlogfile.Event{Type: binlogfile.GTIDEvent, Domain: 2, Seq: 4711}, true},
	} {
		if g.reached(c.e) != c.want {
			t.Errorf("%+v: reached %v", c.e, !c.want)
		}
	}
	for _, bad := range []string{"", "0-1", "a-b-c", "0-1-2-3", "-1-1-1"} {
		if _, _, err := parseGTID(bad); err == nil {
			t.Errorf("%q was read as a GTID", bad)
		}
	}
}
