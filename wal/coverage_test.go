package wal

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestBackupRange(t *testing.T) {
	facts := map[string]string{"system_identifier": "7301234567890123456", "timeline": "1", "start_lsn": "0/2000028",
		"stop_lsn": "0/4000100", "stop_timeline": "1", "wal_segment_size": "16777216"}
	r, ok, err := BackupRange(facts)
	if !ok || err != nil || !r.Complete() {
		t.Fatalf("%+v %v %v", r, ok, err)
	}
	if first, last := r.Names(); first != "000000010000000000000002" || last != "000000010000000000000004" {
		t.Errorf("names %s … %s", first, last)
	}
	// A stop at a segment's first byte needs only the segment before.
	facts["stop_lsn"] = "0/5000000"
	r, _, _ = BackupRange(facts)
	if _, last := r.Names(); last != "000000010000000000000004" {
		t.Errorf("a stop on a boundary needs up to %s", last)
	}
	if _, ok, _ := BackupRange(map[string]string{"database": "app"}); ok {
		t.Error("a logical dump's run read as a base backup")
	}
	facts["stop_lsn"] = "0/1000000" // before the start
	if _, _, err := BackupRange(facts); err == nil || !strings.Contains(err.Error(), "stop_lsn") {
		t.Errorf("a stop before the start: %v", err)
	}
}

// TestMissingAndBefore archives segments 1-3 and 5 of timeline 1 and 6 of
// timeline 2: a backup from 2 to 5 lacks 4; one from 5 to 6 that crossed
// to timeline 2 lacks nothing; what comes before segment 3 is 1 and 2 and
// the .backup file, never the history file.
func TestMissingAndBefore(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	for _, n := range []uint64{1, 2, 3, 5} {
		if _, err := a.Push(ctx, c.write(t, name(1, n), segment(testSysID, 1, n))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Push(ctx, c.write(t, name(2, 6), segment(testSysID, 2, 6))); err != nil {
		t.Fatal(err)
	}
	seg := uint64(a.SegmentSize)
	for f, text := range map[string]string{
		"00000002.history":              "1\t0/" + fmt.Sprintf("%X", 5*seg+100) + "\tno recovery target specified\n",
		name(1, 2) + ".00000028.backup": backupLabel(1, 2*seg+0x28, 5*seg+100),
	} {
		if _, err := a.Push(ctx, c.write(t, f, []byte(text))); err != nil {
			t.Fatal(err)
		}
	}
	l, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := Range{SystemID: testSysID, StartTLI: 1, StopTLI: 1, Start: 2*seg + 40, Stop: 5*seg + 100, SegmentSize: a.SegmentSize}
	if names, n := l.Missing(r, 10); n != 1 || len(names) != 1 || names[0] != name(1, 4) {
		t.Errorf("missing %v (%d), want %s", names, n, name(1, 4))
	}
	r = Range{SystemID: testSysID, StartTLI: 1, StopTLI: 2, Start: 5 * seg, Stop: 6*seg + 1, SegmentSize: a.SegmentSize}
	if names, n := l.Missing(r, 10); n != 0 {
		t.Errorf("a backup across a timeline switch lacks %v", names)
	}
	r.SystemID++
	if _, n := l.Missing(r, 10); n != 2 {
		t.Errorf("another cluster's backup found %d of its 2 segments here", 2-n)
	}
	var before []string
	for _, e := range l.Before(testSysID, 3, a.SegmentSize) {
		before = append(before, e.Name)
	}
	if strings.Join(before, " ") != name(1, 1)+" "+name(1, 2)+" "+name(1, 2)+".00000028.backup" {
		t.Errorf("before segment 3: %v", before)
	}
}

// GapsAfter names what a recovery to the end of the archive would cross
// after a backup: on its timeline from its last segment on (a run right
// after it included), and between the segments of later timelines.
func TestGapsAfter(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	for _, s := range []struct {
		tli uint32
		n   uint64
	}{{1, 1}, {1, 2}, {1, 5}, {1, 6}, {1, 8}, {2, 8}, {2, 11}, {3, 20}} {
		_, err := a.Push(ctx, c.write(t, name(s.tli, s.n), segment(testSysID, s.tli, s.n)))
		must(t, err)
	}
	l, err := a.List(ctx)
	must(t, err)
	seg := uint64(a.SegmentSize)
	r := Range{SystemID: testSysID, StartTLI: 1, StopTLI: 1, Start: 1*seg + 40, Stop: 2*seg + 100, SegmentSize: a.SegmentSize}
	got := fmt.Sprint(l.GapsAfter(r))
	want := fmt.Sprint([]TimelineGap{
		{1, Gap{name(1, 3), name(1, 4), 2}},
		{1, Gap{name(1, 7), name(1, 7), 1}},
		{2, Gap{name(2, 9), name(2, 10), 2}},
	})
	if got != want {
		t.Errorf("gaps after a backup of segments 1-2:\n got %s\nwant %s", got, want)
	}
	// A backup on timeline 2 sees nothing of timeline 1's.
	r = Range{SystemID: testSysID, StartTLI: 2, StopTLI: 2, Start: 8*seg + 40, Stop: 8*seg + 100, SegmentSize: a.SegmentSize}
	if got := fmt.Sprint(l.GapsAfter(r)); got != fmt.Sprint([]TimelineGap{{2, Gap{name(2, 9), name(2, 10), 2}}}) {
		t.Errorf("gaps after a backup of segment 8 of timeline 2: %s", got)
	}
	// Nothing missing after the last segment.
	r = Range{SystemID: testSysID, StartTLI: 3, StopTLI: 3, Start: 20*seg + 40, Stop: 20*seg + 100, SegmentSize: a.SegmentSize}
	if g := l.GapsAfter(r); len(g) != 0 {
		t.Errorf("gaps after the newest segment: %v", g)
	}
}
