package wal

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/wal/walname"
)

// firstPages are the first 40 bytes of segment 000000010000000000000001
// and of global/pg_control as each server wrote them (initdb of the test
// images postgres:13, 15, 17 and 18: Debian's 13.23, 15.20, 17.12,
// 18.6), and for 14 and 16, which have no image, the same header with
// their XLOG_PAGE_MAGIC (PostgreSQL's src/include/access/xlog_internal.h).
var firstPages = []struct {
	version        int
	header, contrl string
}{
	{13, "06d10200010000000000000100000000000000000000000023908b07ad3c0b6b0000000100200000", "23908b07ad3c0b6b14050000a1620a0c"},
	{14, "0dd10200010000000000000100000000000000000000000023908b07ad3c0b6b0000000100200000", "23908b07ad3c0b6b14050000a1620a0c"},
	{15, "10d10200010000000000000100000000000000000000000024004fa8ad3c0b6b0000000100200000", "24004fa8ad3c0b6b1405000025770d0c"},
	{16, "13d10200010000000000000100000000000000000000000024004fa8ad3c0b6b0000000100200000", "24004fa8ad3c0b6b1405000025770d0c"},
	{17, "16d1020001000000000000010000000000000000000000002230e3f2ad3c0b6b0000000100200000", "2230e3f2ad3c0b6ba40600008979100c"},
	{18, "18d10200010000000000000100000000000000000000000023f0590fae3c0b6b0000000100200000", "23f0590fae3c0b6b080700003300120c"},
}

// Every version's first page reads the same: timeline, system identifier
// (pg_control's first field, as pg_controldata printed it) and segment
// size, and its magic names the version.
func TestHeaderOfEachVersion(t *testing.T) {
	sysids := map[int]uint64{13: 7713325500655702051, 14: 7713325500655702051, 15: 7713325503352864804, 16: 7713325503352864804, 17: 7713325504604090402, 18: 7713325505081634851}
	for _, p := range firstPages {
		b, _ := hex.DecodeString(p.header)
		h, err := walname.ParseHeader(b)
		if err != nil || h.Version != p.version || h.Timeline != 1 || h.SegmentSize != 16<<20 || h.SystemID != sysids[p.version] {
			t.Errorf("PostgreSQL %d: %+v %v", p.version, h, err)
		}
		c, _ := hex.DecodeString(p.contrl)
		if id, err := walname.ControlSystemID(c); err != nil || id != h.SystemID {
			t.Errorf("PostgreSQL %d: pg_control's system identifier %d %v, the segment's %d", p.version, id, err, h.SystemID)
		}
	}
}

// A segment of every version pipe knows is archived; one of a version it
// does not know (12's format, or a later one) is refused, naming the
// versions it knows, before anything is stored.
func TestPushRefusesAnUnknownWALFormat(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	for i, p := range firstPages {
		seg := segment(testSysID, 1, uint64(i))
		b, _ := hex.DecodeString(p.header)
		copy(seg[:2], b[:2])
		if _, err := a.Push(ctx, c.write(t, name(1, uint64(i+1)), seg)); err != nil {
			t.Errorf("PostgreSQL %d: %v", p.version, err)
		}
	}
	for _, magic := range []uint16{0xD101, 0xD11A} { // 12, and one after 18
		seg := segment(testSysID, 1, 99)
		binary.LittleEndian.PutUint16(seg, magic)
		n := name(1, 50)
		_, err := a.Push(ctx, c.write(t, n, seg))
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("0x%04X", magic)) || !strings.Contains(err.Error(), "PostgreSQL 13 to 18") {
			t.Errorf("magic 0x%04X: %v", magic, err)
		}
		if objs, _, err := a.find(ctx, walname.Dir(testSysID, 1), n); err != nil || len(objs) != 0 {
			t.Errorf("magic 0x%04X: archived as %v (%v)", magic, objs, err)
		}
	}
}
