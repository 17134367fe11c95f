package integration

import (
	"context"
	"encoding/binary"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/wal"
	"github.com/pipebackup/pipe/wal/walname"
)

// The WAL archive's promises on a real store (each object store's
// conformance test runs them on its own; the fs store's are in package
// wal): of two pushes of different content under one name at the same
// moment exactly one archives its file; a segment missing before later
// WAL of its timeline is a hole, after the last one it is not archived;
// and a store that is not there (a bucket or container that does not
// exist) never reads as an empty archive.

const walTestSysID = 7301234567890123456

// walSegment is a 1 MiB segment of the test cluster on timeline 1.
func walSegment(seed uint64) []byte {
	b := randomBytes(seed, 1<<20)
	binary.LittleEndian.PutUint16(b[0:], 0xD110)
	binary.LittleEndian.PutUint16(b[2:], 0x0002) // XLP_LONG_HEADER
	binary.LittleEndian.PutUint32(b[4:], 1)
	binary.LittleEndian.PutUint64(b[24:], walTestSysID)
	binary.LittleEndian.PutUint32(b[32:], 1<<20)
	binary.LittleEndian.PutUint32(b[36:], 8192)
	return b
}

func walArchive(st sdk.Sink, root string) *wal.Archive {
	return &wal.Archive{Store: st.(wal.Store), Root: root, SystemID: walTestSysID, SegmentSize: 1 << 20, Exclusive: true}
}

// walStoreSuite runs the promises on store, under root; missing is the
// same store type configured for a bucket or container that does not
// exist, or nil when configuring it failed already (which is as good).
func walStoreSuite(t *testing.T, store sdk.Sink, root string, missing sdk.Sink) {
	ctx := context.Background()
	seg := func(n uint64) string { return walname.SegmentName(1, n, 1<<20) }
	t.Run("two pushes race for one name", func(t *testing.T) {
		archives := [2]*wal.Archive{walArchive(store, root), walArchive(store, root)}
		for n := uint64(1); n <= 6; n++ {
			f, _ := walname.ParseName(seg(n))
			data := [2][]byte{walSegment(n), walSegment(n + 100)}
			var errs [2]error
			var wg sync.WaitGroup
			start := make(chan struct{})
			for i := range archives {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					_, errs[i] = archives[i].PushData(ctx, f, data[i])
				}()
			}
			close(start)
			wg.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !errors.Is(err, wal.ErrConflict):
					t.Fatalf("%s: a push failed with %v, not a conflict", f.Name, err)
				}
			}
			if won != 1 {
				t.Fatalf("%s: %d of two pushes of different content archived their file (%v)", f.Name, won, errs)
			}
		}
		l, err := archives[0].List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Entries) != 6 || len(l.Duplicates) != 0 {
			t.Fatalf("the archive holds %d files and duplicates %v after 6 races", len(l.Entries), l.Duplicates)
		}
	})
	t.Run("a hole is not the end", func(t *testing.T) {
		a := walArchive(store, root+"hole/")
		for _, n := range []uint64{1, 2, 4, 5000} {
			f, _ := walname.ParseName(seg(n))
			if _, err := a.PushData(ctx, f, walSegment(n)); err != nil {
				t.Fatal(err)
			}
		}
		dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
		for n, want := range map[uint64]error{3: wal.ErrHole, 6: wal.ErrHole, 4999: wal.ErrHole, 5001: wal.ErrNotArchived} {
			if err := a.Fetch(ctx, seg(n), dest); !errors.Is(err, want) {
				t.Errorf("fetch %s: %v, want %v", seg(n), err, want)
			}
		}
		if err := a.Fetch(ctx, seg(4), dest); err != nil {
			t.Errorf("fetch %s: %v", seg(4), err)
		}
	})
	t.Run("a missing store is not an empty archive", func(t *testing.T) {
		if missing == nil {
			t.Log("configuring the store for a bucket that does not exist failed already")
			return
		}
		a := walArchive(missing, root)
		if err := a.Fetch(ctx, seg(1), filepath.Join(t.TempDir(), "x")); err == nil || errors.Is(err, wal.ErrNotArchived) {
			t.Errorf("fetch from a store that does not exist: %v", err)
		}
		if _, err := a.List(ctx); err == nil {
			t.Error("listed a store that does not exist as an empty archive")
		}
	})
}
