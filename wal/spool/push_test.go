package spool

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// A note whose file's identity changed (another copy of the data
// directory, a file rewritten) is believed only when the file's digest
// says so. Without a digest (pipe-wal) it is neither believed nor
// dropped, and a wait for the pusher ends at once: pipe decides.
func TestNotedUnsure(t *testing.T) {
	dir := t.TempDir()
	wal := filepath.Join(dir, "pg_wal")
	const name = "000000010000000000000003"
	p := filepath.Join(wal, name)
	for _, d := range []string{filepath.Join(wal, "archive_status"), filepath.Join(dir, "spool")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(p, []byte("wal"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(wal, "archive_status", name+".ready"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := "0123456789abcdef0123456789abcdef"
	key := "wal/1/00000001/" + name + "-" + sum + "-" + sum + sum + ".zst"
	s := Push{Dir: filepath.Join(dir, "spool")}
	if err := s.Note(name, p, key); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Noted(name, p); got != key || err != nil {
		t.Fatalf("the file as noted: %q, %v", got, err)
	}
	// The file rewritten: another modification time.
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(p, later, later); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Noted(name, p); got != "" || !errors.Is(err, ErrUnsure) {
		t.Errorf("without a digest: %q, %v, want ErrUnsure", got, err)
	}
	// Neither wait waits for a note it cannot check: each returns before
	// a deadline far short of its own minute.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := s.Wait(ctx, name, p, time.Minute, func() (<-chan struct{}, error) { return make(chan struct{}), nil }); got != "" || !errors.Is(err, ErrUnsure) {
		t.Errorf("a wait without a digest: %q, %v, want ErrUnsure", got, err)
	}
	if got := s.WaitNoted(ctx, name, p, time.Minute); got != "" || ctx.Err() != nil {
		t.Errorf("pipe-wal's wait: %q (context: %v), want none at once", got, ctx.Err())
	}
	// The digest decides: the same file is believed, other content drops
	// the note.
	s.Same = func(string, string) bool { return true }
	if got, err := s.Noted(name, p); got != key || err != nil {
		t.Errorf("the same digest: %q, %v", got, err)
	}
	s.Same = func(string, string) bool { return false }
	if got, err := s.Noted(name, p); got != "" || err != nil {
		t.Errorf("another digest: %q, %v", got, err)
	}
	if Exists(filepath.Join(s.Dir, name+OKExt)) {
		t.Error("the stale note stayed")
	}
}
