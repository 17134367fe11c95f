package wal

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/zeebo/xxh3"
	"golang.org/x/sync/errgroup"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/wal/spool"
)

// Pushes whose stored bytes outgrow the archive's StoredMemory spill to
// a temporary file (removed at once, so nothing is left), and pushes
// whose objects outgrow TransferMemory wait for each other: all of them
// are archived whole, encrypted or not, and fetch back to their files.
func TestPushSpills(t *testing.T) {
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	must(t, err)
	for _, encrypted := range []bool{false, true} {
		c := newCluster(t, testSysID)
		a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
		if encrypted {
			a.Encrypt = &encrypt.Keys{Recipients: []age.Recipient{id.Recipient()}}
			a.Decrypt = &encrypt.Keys{Identities: []age.Identity{id}}
		}
		a.SpillDir = t.TempDir()
		a.StoredMemory = blockSize       // one block: every object here is larger
		a.TransferMemory = blockSize / 2 // less than any object: one at a time
		files := map[string][]byte{}
		for n := uint64(1); n <= 6; n++ {
			data := segment(testSysID, 1, n)
			if n%2 == 0 {
				_, _ = rand.Read(data[64:]) // incompressible: stored larger than the file
			}
			files[name(1, n)] = data
		}
		var g errgroup.Group
		for nm, data := range files {
			p := c.write(t, nm, data)
			g.Go(func() error {
				r, err := a.Push(ctx, p)
				if err == nil && r.Stored <= blockSize {
					t.Errorf("%s: stored %d bytes, not more than the memory for them: the test spills nothing", nm, r.Stored)
				}
				return err
			})
		}
		must(t, g.Wait())
		if ents, _ := os.ReadDir(a.SpillDir); len(ents) != 0 {
			t.Errorf("spill files left: %v", ents)
		}
		for nm, data := range files {
			got, err := a.FetchData(ctx, nm)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("encrypted %v, %s: fetched %d bytes (%v), want the %d pushed", encrypted, nm, len(got), err, len(data))
			}
		}
		// A spill folder that is not there: the system's takes it.
		a.SpillDir = filepath.Join(t.TempDir(), "missing")
		data := segment(testSysID, 1, 7)
		_, _ = rand.Read(data[64:])
		if _, err := a.Push(ctx, c.write(t, name(1, 7), data)); err != nil {
			t.Errorf("a push whose spill folder is missing: %v", err)
		}
	}
}

// A push holds no copy of its file: while it stores the object, the heap
// it holds is the stored bytes and a frame's buffers (before, it held the
// segment and its two encoded forms whole: three times the segment).
func TestPushStreams(t *testing.T) {
	ctx := context.Background()
	const size = 8 * testSegSize
	c, a := bigArchive(t, size)
	hs := &heapStore{Store: a.Store}
	a.Store = hs
	for n := uint64(1); n <= 3; n++ {
		seg := bigSegment(size, n)
		p := c.write(t, name(1, n), seg)
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		hs.base, hs.peak = m.HeapInuse, 0
		r, err := a.Push(ctx, p)
		must(t, err)
		// The stored bytes, held until they go up (within StoredMemory),
		// and the frame writer's frame and its bound: less than the
		// segment, where a copy of it alone would be all of it.
		if held := hs.peak - min(hs.peak, hs.base); held > uint64(r.Stored)+4*FrameSize || held >= size || hs.peak == 0 {
			t.Errorf("push %d of a %d-byte segment (stored: %d bytes) held %d bytes of heap while it stored the object", n, size, r.Stored, held)
		}
	}
}

// heapStore notes the heap in use whenever an object of more than a KiB
// is committed (the claim's is not).
type heapStore struct {
	Store
	base, peak uint64
}

func (h *heapStore) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	w, err := h.Store.Create(ctx, obj)
	if err != nil || obj.Size <= 1<<10 {
		return w, err
	}
	return heapWriter{w, h}, nil
}

type heapWriter struct {
	sdk.ObjectWriter
	h *heapStore
}

func (w heapWriter) Commit(ctx context.Context) error {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	w.h.peak = max(w.h.peak, m.HeapInuse)
	return w.ObjectWriter.Commit(ctx)
}

// readBlocks refuses a file that grows or shrinks while it is read.
func TestReadBlocksSize(t *testing.T) {
	data := bytes.Repeat([]byte("x"), 3*blockSize+5)
	for _, tc := range []struct {
		size int64
		want string
	}{
		{int64(len(data)), ""}, {int64(len(data)) - 1, "grew"}, {int64(len(data)) + 1, "shrank"},
	} {
		n := 0
		err := readBlocks(bytes.NewReader(data), tc.size, func(b []byte) error { n += len(b); return nil })
		switch {
		case tc.want == "" && (err != nil || n != len(data)):
			t.Errorf("size %d: %v after %d bytes", tc.size, err, n)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("size %d: %v, want it to say %q", tc.size, err, tc.want)
		}
	}
}

// A push that waits for the background pusher, of a file that stops being
// marked ready meanwhile (PostgreSQL marked it done after an earlier
// archive_command, and someone pushes it again), pushes it itself: no
// pusher would, and waiting would end in the timeout.
func TestPushNoLongerReady(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	root := filepath.Join(t.TempDir(), "wal")
	data := segment(testSysID, 1, 3)
	p := c.write(t, name(1, 3), data)
	ready := filepath.Join(c.dir, "pg_wal", "archive_status", name(1, 3)+".ready")
	spawns := 0
	cmd := &Command{Command: spool.Command{DataDir: c.dir, Log: discard(),
		Settings: spool.Settings{Async: true, Background: spool.BackgroundAlways, Workers: 2, PushSpool: "pg_wal/pipe-spool/push", PushTimeout: 30 * time.Second},
		// The pusher this push starts never runs; meanwhile the file is
		// marked done.
		Spawn: func([]string, string) (<-chan struct{}, error) {
			spawns++
			return nil, os.Rename(ready, strings.TrimSuffix(ready, ".ready")+".done")
		},
	},
		Open: func(context.Context) (*Archive, func(), error) { return newArchive(t, root, c), func() {}, nil },
	}
	start := time.Now()
	r, err := cmd.Push(ctx, p)
	if err != nil || r.Already || spawns != 1 {
		t.Fatalf("push: %+v, %v (%d pushers started)", r, err, spawns)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the push took %s: it waited for the pusher", d)
	}
	got, err := newArchive(t, root, c).FetchData(ctx, name(1, 3))
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("fetched %d bytes, %v", len(got), err)
	}
}

// A segment that does not compress, in many frames, stores larger than
// itself, within MaxObject, and fetches back (fetch refuses objects
// larger than MaxObject).
func TestIncompressibleFrames(t *testing.T) {
	ctx := context.Background()
	const size = 4 * FrameSize
	c, a := bigArchive(t, size)
	seg := bigSegment(size, 1)
	_, _ = rand.Read(seg[64:])
	r, err := a.Push(ctx, c.write(t, name(1, 1), seg))
	must(t, err)
	if r.Stored <= size || r.Stored > a.MaxObject() {
		t.Errorf("stored %d bytes of a %d-byte segment that does not compress; MaxObject %d", r.Stored, size, a.MaxObject())
	}
	got, err := a.FetchData(ctx, name(1, 1))
	if err != nil || !bytes.Equal(got, seg) {
		t.Errorf("fetched %d bytes, %v", len(got), err)
	}
}

// bigArchive is a cluster and its archive of segments of size bytes.
func bigArchive(t *testing.T, size uint32) (*cluster, *Archive) {
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	a.SegmentSize = size
	return c, a
}

// bigSegment is a segment of size bytes (a multiple of testSegSize).
func bigSegment(size uint32, seed uint64) []byte {
	seg := bytes.Repeat(segment(testSysID, 1, seed), int(size/testSegSize))
	binary.LittleEndian.PutUint32(seg[32:], size)
	return seg
}

// objectDigest is the digest in an object's name of stored bytes b.
func objectDigest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileDigest is the file digest in an object's name of file b.
func fileDigest(b []byte) string {
	s := xxh3.Hash128(b).Bytes()
	return hex.EncodeToString(s[:])
}
