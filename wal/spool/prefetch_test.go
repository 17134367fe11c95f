package spool

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// A fetch notes recovery's position for a background prefetcher to
// follow, and only where one may run.
func TestNotePosition(t *testing.T) {
	const sysid, seg = 7, "000000010000000000000005"
	for _, unfollowed := range []bool{false, true} {
		pf := &Prefetch{Spool: t.TempDir(), Ahead: 4, SegmentSize: 16 << 20, Unfollowed: unfollowed}
		dir := pf.Dir(sysid)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, seg), []byte("wal"), 0o600); err != nil {
			t.Fatal(err)
		}
		dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
		if took, err := pf.Take(sysid, seg, dest); err != nil || !took {
			t.Fatalf("Take: %v, %v", took, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, PositionFile))
		switch {
		case unfollowed && !errors.Is(err, fs.ErrNotExist):
			t.Errorf("with no prefetcher to follow it, the position was noted (%q, %v)", b, err)
		case !unfollowed && (err != nil || string(b) != seg+"\n"):
			t.Errorf("position %q (%v), want %s", b, err, seg)
		}
	}
}
