package binlogfile

import (
	"bytes"
	"encoding/binary"
	"testing"
)

func event(ts uint32, typ byte, size int, seq uint64) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b[0:], ts)
	b[4] = typ
	binary.LittleEndian.PutUint32(b[5:], 9)
	binary.LittleEndian.PutUint32(b[9:], uint32(size))
	if typ == GTIDEvent {
		binary.LittleEndian.PutUint64(b[19:], seq)
		binary.LittleEndian.PutUint32(b[27:], 3)
	}
	return b
}

// TestScan reads whole events from a position on, their GTIDs, and stops
// at an event cut short, as an archive's end may be.
func TestScan(t *testing.T) {
	file := append([]byte{0xfe, 'b', 'i', 'n'}, event(10, 15, 100, 0)...)
	file = append(file, event(11, GTIDEvent, 40, 7)...)
	file = append(file, event(11, 2, 60, 0)...)
	file = append(file, event(12, GTIDEvent, 40, 8)[:30]...) // cut short
	var got []Event
	if err := Scan(bytes.NewReader(file), 0, func(e Event) bool { got = append(got, e); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Pos != 104 || got[1].Seq != 7 || got[1].Domain != 3 || got[2].Timestamp != 11 || got[0].ServerID != 9 {
		t.Fatalf("events: %+v", got)
	}
	got = nil
	Scan(bytes.NewReader(file), 144, func(e Event) bool { got = append(got, e); return true })
	if len(got) != 1 || got[0].Pos != 144 {
		t.Fatalf("from 144: %+v", got)
	}
	if err := Scan(bytes.NewReader([]byte("not a binlog")), 0, func(Event) bool { return true }); err == nil {
		t.Fatal("a file without the magic number was read")
	}
	bad := append([]byte{0xfe, 'b', 'i', 'n'}, event(10, 2, 19, 0)...)
	binary.LittleEndian.PutUint32(bad[4+9:], 5)
	if err := Scan(bytes.NewReader(bad), 0, func(Event) bool { return true }); err == nil {
		t.Fatal("an event smaller than its header was read")
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{"mysql-bin.000009": "mysql-bin.000010", "x.999999": "x.1000000", "db1-bin.000123": "db1-bin.000124"} {
		if got, err := NextName(in); err != nil || got != want {
			t.Errorf("NextName(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := NextName("mysql-bin"); err == nil {
		t.Error("a name without a number has a next")
	}
	if CompareNames("b.000010", "b.000009") <= 0 || CompareNames("a.000002", "b.000001") >= 0 {
		t.Error("CompareNames orders by base, then number")
	}
}
