package wal

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipebackup/pipe/wal/spool"
	"golang.org/x/sys/unix"
)

// fullDisk makes statfs report the spool's disk full once full is set.
func fullDisk(t *testing.T, full *atomic.Bool) {
	real := spool.Statfs
	spool.Statfs = func(path string, st *unix.Statfs_t) error {
		if err := real(path, st); err != nil {
			return err
		}
		if full.Load() {
			st.Bavail = 0
		}
		return nil
	}
	t.Cleanup(func() { spool.Statfs = real })
}

// A push spool on a full disk: no note can be written, so a push does
// not wait for the background pusher's (its whole timeout, blaming the
// pusher), nor take the spool's lock to push ahead; it returns spool.ErrSpool,
// naming the disk, at once, and pipe wal push pushes its file itself. A
// disk that fills while a push waits ends the wait too, and pipe-wal's
// wait as well.
func TestSpoolFull(t *testing.T) {
	ctx := context.Background()
	var full atomic.Bool
	fullDisk(t, &full)
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	p := c.write(t, name(1, 1), segment(testSysID, 1, 1))
	dir := filepath.Join(c.dir, "pg_wal", "pipe-spool", "push")
	// A pusher that runs and never notes anything.
	held, err := spool.Lock(dir, spool.PusherLock)
	must(t, err)
	defer held.Close()
	spawned := 0
	ah := &Pusher{Archive: a, WalDir: filepath.Join(c.dir, "pg_wal"), Spool: dir, Workers: 2, Wait: time.Minute, Log: discard(),
		Spawn: func() (<-chan struct{}, error) { spawned++; return make(chan struct{}), nil }}

	full.Store(true)
	start := time.Now()
	_, err = ah.Push(ctx, name(1, 1), p)
	if !errors.Is(err, spool.ErrSpool) || !strings.Contains(err.Error(), "is full") || !strings.Contains(err.Error(), dir) {
		t.Fatalf("a push with the spool's disk full: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the push took %s to notice", d)
	}
	if key := (spool.Push{Dir: dir}).WaitNoted(ctx, name(1, 1), p, time.Minute); key != "" || time.Since(start) > 5*time.Second {
		t.Errorf("pipe-wal's wait with the disk full: %q after %s", key, time.Since(start))
	}

	// The disk fills while the push waits.
	full.Store(false)
	go func() { time.Sleep(300 * time.Millisecond); full.Store(true) }()
	start = time.Now()
	if _, err = ah.Push(ctx, name(1, 1), p); !errors.Is(err, spool.ErrSpool) || time.Since(start) > 5*time.Second {
		t.Errorf("a push whose spool filled while it waited: %v after %s", err, time.Since(start))
	}

	// Without a background pusher: before the spool's lock.
	ah.Spawn = nil
	if _, err := ah.Push(ctx, name(1, 1), p); !errors.Is(err, spool.ErrSpool) {
		t.Errorf("a push ahead with the spool's disk full: %v", err)
	}
	// Room again: it pushes.
	full.Store(false)
	if r, err := ah.Push(ctx, name(1, 1), p); err != nil || r.Key == "" {
		t.Errorf("a push with room in the spool: %+v, %v", r, err)
	}
}
