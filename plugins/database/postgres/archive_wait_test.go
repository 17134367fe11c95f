package postgres

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/wal"
)

// drain reads every stream of a started fake backup.
func drain(t *testing.T, ctx context.Context, s *BaseSource) {
	t.Helper()
	for _, info := range s.streams {
		r, err := s.Open(ctx, info.Name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			t.Fatal(err)
		}
		r.Close()
	}
}

// backUp takes a whole backup from f.
func backUp(t *testing.T, f *fakeServer) *BaseSource {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := fakeSource(t, f)
	if _, err := s.Streams(ctx); err != nil {
		t.Fatal(err)
	}
	drain(t, ctx, s)
	if _, err := s.Conclude(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBaseSourceWatchesTheArchiver: where pipe can read pg_stat_archiver,
// the server is told not to wait for the archive (it would look once a
// second) and the backup ends once the archiver has stored its last
// segment, 000000010000000000000002 for the fake's stop at 0/2000100.
func TestBaseSourceWatchesTheArchiver(t *testing.T) {
	f := &fakeServer{settings: goodSettings(), archives: [][2]string{{"base.tar", "data"}, {"", "{}"}},
		archiver: []string{"000000010000000000000001", "000000010000000000000001", "00000002.history", "000000010000000000000002", "000000010000000000000003"}}
	backUp(t, f)
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.commands) != 1 || !strings.Contains(f.commands[0], "WAIT false") {
		t.Errorf("BASE_BACKUP commands %q: want one with WAIT false", f.commands)
	}
	// One look when the watch opened (the first answer), then one per
	// answer until the segment's: it neither stops early nor looks on.
	if f.looks != 4 {
		t.Errorf("looked at the archiver %d times, want 4", f.looks)
	}
}

// TestBaseSourceLetsTheServerWait: without pg_stat_archiver (the fake
// refuses the query, as a pg_hba.conf with only replication lines does),
// on 13 and 14, and on a standby, the server waits for the archive.
func TestBaseSourceLetsTheServerWait(t *testing.T) {
	standby := goodSettings()
	standby["in_hot_standby"], standby["archive_mode"] = "on", "always"
	for _, tc := range []struct {
		name     string
		settings map[string]string
		archiver []string
	}{
		{"no pg_stat_archiver", goodSettings(), nil},
		{"14", oldSettings("140010", "14.10"), []string{"000000010000000000000002"}},
		{"standby", standby, []string{"000000010000000000000002"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeServer{settings: tc.settings, archives: [][2]string{{"base.tar", openTar(t, "PG_VERSION", "14\n")}, {"", "{}"}}, archiver: tc.archiver}
			s := backUp(t, f)
			f.mu.Lock()
			defer f.mu.Unlock()
			if len(f.commands) != 1 || strings.Contains(f.commands[0], "WAIT false") || strings.Contains(f.commands[0], "NOWAIT") {
				t.Errorf("BASE_BACKUP commands %q: want the server's wait", f.commands)
			}
			if s.watch != nil {
				t.Error("a watch of the archiver was kept")
			}
		})
	}
}

// TestBaseSourceWaitsForAStuckArchiver: a backup whose last segment is
// never archived does not conclude, and Close ends the wait.
func TestBaseSourceWaitsForAStuckArchiver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f := &fakeServer{settings: goodSettings(), archives: [][2]string{{"base.tar", "data"}, {"", "{}"}},
		archiver: []string{"000000010000000000000001"}}
	s := fakeSource(t, f)
	if _, err := s.Streams(ctx); err != nil {
		t.Fatal(err)
	}
	drain(t, ctx, s)
	short, stop := context.WithTimeout(ctx, 400*time.Millisecond)
	defer stop()
	if _, err := s.Conclude(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("concluded before the last segment was archived: %v", err)
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
	case <-ctx.Done():
		t.Fatal("Close did not end the wait for the archive")
	}
	if s.err == nil || !strings.Contains(s.err.Error(), "000000010000000000000002") {
		t.Errorf("the wait ended with %v, want an error naming the segment", s.err)
	}
}

func TestArchivedThrough(t *testing.T) {
	const end = "000000020000000A000000FF"
	for _, tc := range []struct {
		last string
		want bool
	}{
		{"", false},
		{"000000020000000A000000FE", false},
		{"000000020000000A000000FF", true},
		{"000000020000000B00000000", true},
		{"000000020000000A000000FF.00000028.backup", true}, // written after the switch that ended the segment
		{"000000020000000A000000FE.00000028.backup", false},
		{"000000020000000A000000FF.partial", true},
		{"00000002.history", false},
		{"000000010000000B00000000", false}, // an earlier timeline's
		{"000000020000000A000000FFX", false},
		{"000000020000000A000000FF.history", false},
		{"00000002000000ZA000000FF", false},
	} {
		if got := archivedThrough(tc.last, end); got != tc.want {
			t.Errorf("archivedThrough(%q, %q) = %v, want %v", tc.last, end, got, tc.want)
		}
	}
}

// lastSegment names the segment the catalog's range ends at.
func TestLastSegmentIsTheCatalogs(t *testing.T) {
	for _, tc := range []struct{ start, stop, tli, size string }{
		{"0/2000028", "0/2000100", "1", "16777216"},
		{"0/2000028", "0/3000000", "1", "16777216"}, // stop at a segment's first byte: the one before
		{"0/2000028", "0/2000028", "3", "16777216"},
		{"A/FF000028", "B/00000100", "2", "16777216"},
		{"1/00000028", "1/00400000", "1", "1048576"},
		{"3/00000028", "3/40000010", "7", "1073741824"},
	} {
		got, err := lastSegment(tc.start, tc.stop, tc.tli, tc.size)
		r, _, rerr := wal.BackupRange(map[string]string{factSystemID: "7301234567890123456", factTimeline: tc.tli, factStopTLI: tc.tli,
			factStartLSN: tc.start, factStopLSN: tc.stop, factSegSize: tc.size})
		_, want := r.Names()
		if err != nil || rerr != nil || got != want {
			t.Errorf("lastSegment(%s, %s, %s, %s) = %s, %v; the catalog's %s, %v", tc.start, tc.stop, tc.tli, tc.size, got, err, want, rerr)
		}
	}
	for _, bad := range [][4]string{{"x", "0/1", "1", "16777216"}, {"0/1", "0/2", "0", "16777216"}, {"0/1", "0/2", "1", "1000"}} {
		if _, err := lastSegment(bad[0], bad[1], bad[2], bad[3]); err == nil {
			t.Errorf("lastSegment%q: no error", bad)
		}
	}
}
