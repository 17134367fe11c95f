package wal

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/fs"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/wal/spool"
	"github.com/pipebackup/pipe/wal/walname"
)

const (
	testSysID   = 7301234567890123456
	testSegSize = 1 << 20
	// xlpLongHeader is PostgreSQL's XLP_LONG_HEADER: the first page of a
	// segment has the long header.
	xlpLongHeader = 0x0002
)

// segment returns a WAL segment of the cluster sysid on timeline tli: a
// long page header and pseudo-random records that compress a little.
func segment(sysid uint64, tli uint32, seed uint64) []byte {
	b := make([]byte, testSegSize)
	binary.LittleEndian.PutUint16(b[0:], 0xD110)
	binary.LittleEndian.PutUint16(b[2:], xlpLongHeader)
	binary.LittleEndian.PutUint32(b[4:], tli)
	binary.LittleEndian.PutUint64(b[24:], sysid)
	binary.LittleEndian.PutUint32(b[32:], testSegSize)
	binary.LittleEndian.PutUint32(b[36:], 8192)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 64; i < len(b); i += 512 {
		for j := 0; j < 128; j++ {
			b[i+j] = byte(r.Uint32())
		}
	}
	return b
}

// cluster is a data directory: pg_control and pg_wal.
type cluster struct {
	dir   string
	sysid uint64
}

func newCluster(t *testing.T, sysid uint64) *cluster {
	t.Helper()
	c := &cluster{dir: t.TempDir(), sysid: sysid}
	control := make([]byte, 8192)
	binary.LittleEndian.PutUint64(control, sysid)
	must(t, os.MkdirAll(filepath.Join(c.dir, "global"), 0o700))
	must(t, os.WriteFile(filepath.Join(c.dir, "global", "pg_control"), control, 0o600))
	must(t, os.MkdirAll(filepath.Join(c.dir, "pg_wal", "archive_status"), 0o700))
	return c
}

// write puts a file in pg_wal, marked ready.
func (c *cluster) write(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(c.dir, "pg_wal", name)
	must(t, os.WriteFile(p, data, 0o600))
	must(t, os.WriteFile(filepath.Join(c.dir, "pg_wal", "archive_status", name+".ready"), nil, 0o600))
	return p
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// fsStore is the fs sink, a real store.
type fsStore struct {
	*fs.Sink
}

func newArchive(t *testing.T, root string, c *cluster) *Archive {
	t.Helper()
	s, diags := fs.SinkType{}.Configure(context.Background(), sdk.NewConfig(map[string]any{"path": root + "/"}))
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	zstd, _ := compress.Lookup("zstd")
	a := &Archive{Store: fsStore{s.(*fs.Sink)}, Root: root + "/", Codec: zstd, Level: 3, SegmentSize: testSegSize, Exclusive: true}
	if c != nil {
		a.DataDir = c.dir
	}
	return a
}

func name(tli uint32, n uint64) string { return walname.SegmentName(tli, n, testSegSize) }

func TestNames(t *testing.T) {
	for _, ok := range []string{"000000010000000000000003", "00000002.history", "000000010000000000000003.00000028.backup", "000000010000000000000003.partial"} {
		if _, err := walname.ParseName(ok); err != nil {
			t.Errorf("ParseName(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "../000000010000000000000003", "000000010000000000000003/x", "000000000000000000000003", "00000001000000000000003", "00000001000000000000000g", "000000010000000000000003.ready", "RECOVERYHISTORY"} {
		if _, err := walname.ParseName(bad); err == nil {
			t.Errorf("ParseName(%q) accepted it", bad)
		}
	}
	for _, n := range []uint64{0, 1, 255, 256, 4095, 4096, 1 << 20} {
		s := name(3, n)
		got, err := walname.SegmentNumber(s, testSegSize)
		if err != nil || got != n {
			t.Errorf("SegmentNumber(%s) = %d, %v; want %d", s, got, err, n)
		}
	}
	// With 1 MiB segments, a log file holds 4096 of them.
	if got := name(1, 4096); got != "000000010000000100000000" {
		t.Errorf("segment 4096 is %s", got)
	}
	o, err := walname.ParseObject(walname.ObjectName("00000002.history", strings.Repeat("a", 64), strings.Repeat("b", 64), ".zst.age"))
	if err != nil || o.Kind != walname.History || o.Timeline != 2 || o.Ext != ".zst.age" {
		t.Errorf("ParseObject: %+v, %v", o, err)
	}
	if _, err := walname.ParseObject("000000010000000000000003-x-y.zst"); err == nil {
		t.Error("ParseObject accepted a name without digests")
	}
	h, err := walname.ParseHeader(segment(testSysID, 5, 1))
	if err != nil || h.SystemID != testSysID || h.Timeline != 5 || h.SegmentSize != testSegSize {
		t.Errorf("ParseHeader: %+v, %v", h, err)
	}
	if _, err := walname.ParseHeader(make([]byte, 100)); err == nil {
		t.Error("ParseHeader accepted a page without a long header")
	}
}

func TestPushFetch(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	seg := segment(testSysID, 1, 1)
	p := c.write(t, name(1, 1), seg)

	r, err := a.Push(ctx, p)
	if err != nil || r.Already || r.SystemID != testSysID || r.Stored >= r.Bytes {
		t.Fatalf("Push: %+v, %v", r, err)
	}
	if want := fmt.Sprintf("%d/00000001/%s-", uint64(testSysID), name(1, 1)); !strings.Contains(r.Key, want) {
		t.Errorf("key %s does not hold %s", r.Key, want)
	}
	// The same content again: nothing written.
	r2, err := a.Push(ctx, p)
	if err != nil || !r2.Already || r2.Key != r.Key {
		t.Fatalf("second Push: %+v, %v", r2, err)
	}
	// Other content under the same name: refused, and the original stays.
	other := segment(testSysID, 1, 2)
	must(t, os.WriteFile(p, other, 0o600))
	if _, err := a.Push(ctx, p); !errors.Is(err, ErrConflict) {
		t.Fatalf("Push of other content: %v, want ErrConflict", err)
	}
	dest := filepath.Join(t.TempDir(), "RECOVERYXLOG")
	must(t, a.Fetch(ctx, name(1, 1), dest))
	got, err := os.ReadFile(dest)
	must(t, err)
	if !bytes.Equal(got, seg) {
		t.Fatal("the fetched segment is not the one pushed first")
	}
	// A file not archived.
	if err := a.Fetch(ctx, name(1, 2), dest); !errors.Is(err, ErrNotArchived) {
		t.Fatalf("Fetch of a missing segment: %v, want ErrNotArchived", err)
	}
	if err := a.Fetch(ctx, "00000002.history", dest); !errors.Is(err, ErrNotArchived) {
		t.Fatalf("Fetch of a missing history file: %v, want ErrNotArchived", err)
	}
	// A history file (no header to check) and a partial segment.
	hist := []byte("1\t0/3000000\tno recovery target specified\n")
	hp := c.write(t, "00000002.history", hist)
	if _, err := a.Push(ctx, hp); err != nil {
		t.Fatal(err)
	}
	must(t, a.Fetch(ctx, "00000002.history", dest))
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, hist) {
		t.Fatal("the history file came back different")
	}
}

func TestPushRefuses(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	root := filepath.Join(t.TempDir(), "wal")
	must(t, os.Mkdir(root, 0o700)) // listed empty below: it must be there
	a := newArchive(t, root, c)
	// A segment of another cluster (pg_control says testSysID).
	p := c.write(t, name(1, 1), segment(testSysID+1, 1, 1))
	if _, err := a.Push(ctx, p); err == nil || !strings.Contains(err.Error(), "another cluster") {
		t.Errorf("pushing another cluster's segment: %v", err)
	}
	// A header of a later timeline than the name's: no server writes it.
	p = c.write(t, name(1, 1), segment(testSysID, 2, 1))
	if _, err := a.Push(ctx, p); err == nil || !strings.Contains(err.Error(), "timeline") {
		t.Errorf("pushing a segment whose header names a later timeline: %v", err)
	}
	// A short segment.
	p = c.write(t, name(1, 2), segment(testSysID, 1, 1)[:4096])
	if _, err := a.Push(ctx, p); err == nil || !strings.Contains(err.Error(), "not a whole segment") {
		t.Errorf("pushing a short segment: %v", err)
	}
	// A name that is not WAL.
	p = c.write(t, "postgresql.conf", []byte("x"))
	if _, err := a.Push(ctx, p); err == nil {
		t.Error("pushed a file that is not WAL")
	}
	if l, err := a.List(ctx); err != nil || len(l.Entries) != 0 {
		t.Errorf("the archive holds %v after refused pushes (%v)", l, err)
	}
	// The first segment of timeline 2 starts as a copy of timeline 1's
	// (a promotion mid-segment): its header names the parent.
	p = c.write(t, name(2, 1), segment(testSysID, 1, 1))
	if _, err := a.Push(ctx, p); err != nil {
		t.Errorf("pushing the first segment of a new timeline, its header the parent's: %v", err)
	}
}

func TestTwoClusters(t *testing.T) {
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "wal")
	c1, c2 := newCluster(t, testSysID), newCluster(t, testSysID+1)
	a1, a2 := newArchive(t, root, c1), newArchive(t, root, c2)
	s1, s2 := segment(testSysID, 1, 1), segment(testSysID+1, 1, 2)
	for _, x := range []struct {
		a *Archive
		c *cluster
		s []byte
	}{{a1, c1, s1}, {a2, c2, s2}} {
		if _, err := x.a.Push(ctx, x.c.write(t, name(1, 1), x.s)); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range []struct {
		a *Archive
		s []byte
	}{{a1, s1}, {a2, s2}} {
		got, err := x.a.FetchData(ctx, name(1, 1))
		must(t, err)
		if !bytes.Equal(got, x.s) {
			t.Error("a cluster fetched the other's segment")
		}
	}
	ids, err := a1.SystemIDs(ctx)
	if err != nil || len(ids) != 2 {
		t.Errorf("SystemIDs: %v, %v", ids, err)
	}
}

func TestEncrypted(t *testing.T) {
	ctx := context.Background()
	id, err := age.GenerateX25519Identity()
	must(t, err)
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	a.Encrypt = &encrypt.Keys{Recipients: []age.Recipient{id.Recipient()}}
	seg := segment(testSysID, 1, 7)
	r, err := a.Push(ctx, c.write(t, name(1, 1), seg))
	must(t, err)
	if !strings.HasSuffix(r.Key, ".zst.age") {
		t.Errorf("key %s", r.Key)
	}
	raw, err := os.ReadFile(r.Key)
	must(t, err)
	if bytes.Contains(raw, seg[64:192]) {
		t.Error("the stored object holds the segment's bytes in the clear")
	}
	// Without the identity: a clear error, not "not archived".
	if _, err := a.FetchData(ctx, name(1, 1)); err == nil || errors.Is(err, ErrNotArchived) || !strings.Contains(err.Error(), "decrypt") {
		t.Errorf("fetch without an identity: %v", err)
	}
	a.Decrypt = &encrypt.Keys{Identities: []age.Identity{id}}
	got, err := a.FetchData(ctx, name(1, 1))
	must(t, err)
	if !bytes.Equal(got, seg) {
		t.Error("the decrypted segment differs")
	}
	other, err := age.GenerateX25519Identity()
	must(t, err)
	a.Decrypt = &encrypt.Keys{Identities: []age.Identity{other}}
	if _, err := a.FetchData(ctx, name(1, 1)); err == nil {
		t.Error("fetched with the wrong identity")
	}
}

func TestTampered(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	r, err := a.Push(ctx, c.write(t, name(1, 1), segment(testSysID, 1, 1)))
	must(t, err)
	b, err := os.ReadFile(r.Key)
	must(t, err)
	b[len(b)/2] ^= 0xff
	must(t, os.WriteFile(r.Key, b, 0o600))
	if _, err := a.FetchData(ctx, name(1, 1)); err == nil || errors.Is(err, ErrNotArchived) || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("fetching a changed object: %v", err)
	}
	dest := filepath.Join(c.dir, "pg_wal", "RECOVERYXLOG")
	if err := a.Fetch(ctx, name(1, 1), dest); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("restore_command's fetch of a changed object: %v", err)
	}
	if _, err := os.Stat(dest); err == nil {
		t.Error("a changed object was restored")
	}
	l, err := a.List(ctx)
	must(t, err)
	rep, err := a.Verify(ctx, l, false, 4)
	must(t, err)
	if rep.Objects != 1 || len(rep.Bad) != 1 || rep.Bad[0].Key != r.Key {
		t.Errorf("Verify: %+v", rep)
	}

	// Another segment's object under this one's name and file digest: its
	// stored digest matches, what it decodes to does not.
	r2, err := a.Push(ctx, c.write(t, name(1, 2), segment(testSysID, 1, 2)))
	must(t, err)
	o1, err := walname.ParseObject(filepath.Base(r.Key))
	must(t, err)
	o2, err := walname.ParseObject(filepath.Base(r2.Key))
	must(t, err)
	must(t, os.Remove(r.Key))
	forged := filepath.Join(filepath.Dir(r.Key), walname.ObjectName(name(1, 1), o1.FileSum, o2.StoredSum, o2.Ext))
	b2, err := os.ReadFile(r2.Key)
	must(t, err)
	must(t, os.WriteFile(forged, b2, 0o600))
	if err := a.Fetch(ctx, name(1, 1), dest); err == nil || !strings.Contains(err.Error(), "decodes to other bytes") {
		t.Errorf("fetching another segment's object under this name: %v", err)
	}
	if _, err := os.Stat(dest); err == nil {
		t.Error("another segment's contents were restored")
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(dest), ".pipe-tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func TestListGaps(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	for _, n := range []uint64{1, 2, 3, 6, 4095, 4096} {
		_, err := a.Push(ctx, c.write(t, name(1, n), segment(testSysID, 1, n)))
		must(t, err)
	}
	_, err := a.Push(ctx, c.write(t, name(2, 7), segment(testSysID, 2, 7)))
	must(t, err)
	_, err = a.Push(ctx, c.write(t, "00000002.history", []byte("1\t0/7000000\tbefore 2026-11-26\n")))
	must(t, err)
	// Something else in the folder is left alone.
	must(t, os.WriteFile(filepath.Join(a.Root, "README"), []byte("x"), 0o600))
	l, err := a.List(ctx)
	must(t, err)
	if len(l.Timelines) != 2 || l.Other != 1 {
		t.Fatalf("List: %+v", l)
	}
	t1, t2 := l.Timelines[0], l.Timelines[1]
	if t1.Segments != 6 || t1.First != name(1, 1) || t1.Last != name(1, 4096) {
		t.Errorf("timeline 1: %+v", t1)
	}
	want := []Gap{{name(1, 4), name(1, 5), 2}, {name(1, 7), name(1, 4094), 4088}}
	if fmt.Sprint(t1.Gaps) != fmt.Sprint(want) {
		t.Errorf("gaps %v, want %v", t1.Gaps, want)
	}
	if t2.Segments != 1 || len(t2.Gaps) != 0 || len(t2.History) != 1 {
		t.Errorf("timeline 2: %+v", t2)
	}
	if l.Gaps() != 4090 || l.NewestName == "" {
		t.Errorf("Gaps() = %d, newest %q", l.Gaps(), l.NewestName)
	}
	rep, err := a.Verify(ctx, l, true, 3)
	must(t, err)
	if rep.Objects != 8 || len(rep.Bad) != 0 {
		t.Errorf("Verify --decrypt: %+v", rep)
	}
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func TestAhead(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	// A push sends up to aheadPerPush × Workers files: with one worker,
	// a batch and three more.
	const batch = aheadPerPush
	segs := map[string][]byte{}
	for n := uint64(1); n <= batch+3; n++ {
		segs[name(1, n)] = segment(testSysID, 1, n)
		c.write(t, name(1, n), segs[name(1, n)])
	}
	var mu sync.Mutex
	pushed := 0
	waiting := -1
	ah := &Pusher{Archive: a, WalDir: filepath.Join(c.dir, "pg_wal"), Spool: filepath.Join(c.dir, "pg_wal", "pipe-spool", "push"),
		Workers: 1, MaxBacklog: 5, Wait: time.Second, Log: discard(),
		Pushed:  func(*PushResult) { mu.Lock(); pushed++; mu.Unlock() },
		Backlog: func(n int, exceeded bool) { waiting = n }}
	walPath := func(n string) string { return filepath.Join(c.dir, "pg_wal", n) }
	done := func(n string) {
		t.Helper()
		must(t, os.Rename(filepath.Join(c.dir, "pg_wal", "archive_status", n+".ready"), filepath.Join(c.dir, "pg_wal", "archive_status", n+".done")))
	}
	status := func(n string) string {
		t.Helper()
		var found []string
		for _, ext := range []string{".ready", ".done"} {
			if _, err := os.Stat(filepath.Join(c.dir, "pg_wal", "archive_status", n+ext)); err == nil {
				found = append(found, ext)
			}
		}
		return strings.Join(found, "")
	}
	// archive_command for segment 1 pushes 1 and the next batch-1, and
	// marks those done but the newest: PostgreSQL's archiver, waiting for
	// this command, skips them. Its own file is PostgreSQL's to mark.
	r, err := ah.Push(ctx, name(1, 1), walPath(name(1, 1)))
	if err != nil || r.Already || !strings.Contains(r.Key, name(1, 1)) {
		t.Fatalf("Push: %+v, %v", r, err)
	}
	if pushed != batch || waiting != batch+3 {
		t.Errorf("pushed %d files with %d waiting (saw %d), want %d", pushed, batch+3, waiting, batch)
	}
	for n := uint64(1); n <= batch+1; n++ {
		want := ".done"
		if n == 1 || n >= batch {
			want = ".ready"
		}
		if got := status(name(1, n)); got != want {
			t.Errorf("after the first push, %s is %q, want %q", name(1, n), got, want)
		}
	}
	done(name(1, 1))
	// The newest of the batch returns at once: pushed ahead.
	r, err = ah.Push(ctx, name(1, batch), walPath(name(1, batch)))
	if err != nil || !r.Ahead {
		t.Fatalf("Push %d: %+v, %v", batch, r, err)
	}
	done(name(1, batch))
	if pushed != batch {
		t.Errorf("pushed %d files, want still %d", pushed, batch)
	}
	// The next pushes the last three; the markers of files PostgreSQL
	// marked done go.
	if _, err := ah.Push(ctx, name(1, batch+1), walPath(name(1, batch+1))); err != nil {
		t.Fatal(err)
	}
	if pushed != batch+3 {
		t.Errorf("pushed %d files, want %d", pushed, batch+3)
	}
	marks, _ := filepath.Glob(filepath.Join(ah.Spool, "*.ok"))
	if len(marks) != 2 {
		t.Errorf("markers %v, want those of the last two", marks)
	}
	for n, data := range segs {
		got, err := a.FetchData(ctx, n)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %v", n, err)
		}
	}
	// A marker that does not match the file (a copied data directory, a
	// file rewritten) is not believed: the file is pushed, which finds
	// the other content archived and refuses.
	n6 := name(1, batch+2)
	must(t, os.WriteFile(walPath(n6), segment(testSysID, 1, 66), 0o600))
	if _, err := ah.Push(ctx, n6, walPath(n6)); !errors.Is(err, ErrConflict) {
		t.Errorf("a push whose marker does not match: %v, want ErrConflict", err)
	}
	// A push that holds the spool's lock makes another wait, then fail.
	l, err := spool.Lock(ah.Spool, spool.PushLock)
	must(t, err)
	if _, err := ah.Push(ctx, name(1, batch+3), walPath(name(1, batch+3))); err != nil {
		t.Errorf("a file pushed ahead needs no lock: %v", err)
	}
	c.write(t, name(1, batch+4), segment(testSysID, 1, batch+4))
	if _, err := ah.Push(ctx, name(1, batch+4), walPath(name(1, batch+4))); !errors.Is(err, ErrTimeout) {
		t.Errorf("while another push holds the lock: %v, want ErrTimeout", err)
	}
	l.Close()
}

// The background pusher: archive_command for each ready file, in order,
// as PostgreSQL runs it; the pusher pushes them all, each once.
func TestAheadBackground(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	segs := map[string][]byte{}
	for n := uint64(1); n <= 10; n++ {
		segs[name(1, n)] = segment(testSysID, 1, n)
		c.write(t, name(1, n), segs[name(1, n)])
	}
	var mu sync.Mutex
	pushed := map[string]int{}
	var runs sync.WaitGroup
	spawns := 0
	ah := &Pusher{Archive: a, WalDir: filepath.Join(c.dir, "pg_wal"), Spool: filepath.Join(c.dir, "pg_wal", "pipe-spool", "push"),
		Workers: 3, Wait: 10 * time.Second, Idle: 200 * time.Millisecond, Log: discard(),
		Pushed: func(r *PushResult) { mu.Lock(); pushed[path.Base(r.Key)[:24]]++; mu.Unlock() }}
	ah.Spawn = func() (<-chan struct{}, error) {
		spawns++
		runs.Add(1)
		exited := make(chan struct{})
		go func() {
			defer runs.Done()
			defer close(exited)
			if err := ah.Run(ctx); err != nil && !errors.Is(err, spool.ErrBusy) {
				t.Error(err)
			}
		}()
		return exited, nil
	}
	status := filepath.Join(c.dir, "pg_wal", "archive_status")
	for n := uint64(1); n <= 10; n++ {
		s := name(1, n)
		r, err := ah.Push(ctx, s, filepath.Join(c.dir, "pg_wal", s))
		if err != nil || !strings.Contains(r.Key, s) {
			t.Fatalf("Push %s: %+v, %v", s, r, err)
		}
		must(t, os.Rename(filepath.Join(status, s+".ready"), filepath.Join(status, s+".done")))
	}
	runs.Wait()
	for s, data := range segs {
		if pushed[s] != 1 {
			t.Errorf("%s was pushed %d times", s, pushed[s])
		}
		got, err := a.FetchData(ctx, s)
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %v", s, err)
		}
	}
	if spawns < 1 {
		t.Error("no pusher was started")
	}
	if marks, _ := filepath.Glob(filepath.Join(ah.Spool, "*.ok")); len(marks) != 0 {
		t.Errorf("notes left: %v", marks)
	}
	// A failure reaches the archive_command of its file.
	a.Store = failingStore{a.Store}
	c.write(t, name(1, 11), segment(testSysID, 1, 11))
	if _, err := ah.Push(ctx, name(1, 11), filepath.Join(c.dir, "pg_wal", name(1, 11))); err == nil || !strings.Contains(err.Error(), "the store is down") {
		t.Errorf("Push with a failing store: %v", err)
	}
	runs.Wait()
}

// A push waiting for the pusher it started does not start another while
// that one starts (it holds no lock yet): only once it has exited, as a
// pusher that could not open the store does.
func TestAheadStartsOnePusher(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	p := c.write(t, name(1, 1), segment(testSysID, 1, 1))
	for _, dies := range []bool{false, true} {
		spawns := 0
		ah := &Pusher{WalDir: filepath.Join(c.dir, "pg_wal"), Spool: filepath.Join(c.dir, "pg_wal", "pipe-spool", "push"), Workers: 2,
			Wait: 500 * time.Millisecond, Log: discard(),
			Spawn: func() (<-chan struct{}, error) {
				spawns++
				exited := make(chan struct{})
				if dies {
					close(exited)
				}
				return exited, nil // it never takes the lock, nor notes the file
			}}
		if _, err := ah.Push(ctx, name(1, 1), p); err == nil || !strings.Contains(err.Error(), "did not archive it") {
			t.Fatalf("Push with a pusher that never notes: %v", err)
		}
		switch {
		case !dies && spawns != 1:
			t.Errorf("started %d pushers while the first was starting, want 1", spawns)
		case dies && spawns < 2:
			t.Errorf("started %d pushers when each exited at once, want one after another", spawns)
		}
	}
}

// failingStore fails every Create.
type failingStore struct{ Store }

func (f failingStore) Create(context.Context, sdk.Object) (sdk.ObjectWriter, error) {
	return nil, errors.New("the store is down")
}

func TestAheadFailure(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	a.Store = failingStore{a.Store}
	for n := uint64(1); n <= 3; n++ {
		c.write(t, name(1, n), segment(testSysID, 1, n))
	}
	ah := &Pusher{Archive: a, WalDir: filepath.Join(c.dir, "pg_wal"), Spool: filepath.Join(c.dir, "spool"), Workers: 4, Wait: time.Second, Log: discard()}
	if _, err := ah.Push(ctx, name(1, 1), filepath.Join(c.dir, "pg_wal", name(1, 1))); err == nil || !strings.Contains(err.Error(), "the store is down") {
		t.Fatalf("Push with a failing store: %v", err)
	}
	if marks, _ := filepath.Glob(filepath.Join(ah.Spool, "*.ok")); len(marks) != 0 {
		t.Errorf("failed pushes were marked archived: %v", marks)
	}
}

func TestPrefetch(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	segs := map[string][]byte{}
	for n := uint64(1); n <= 12; n++ {
		segs[name(1, n)] = segment(testSysID, 1, n)
		_, err := a.Push(ctx, c.write(t, name(1, n), segs[name(1, n)]))
		must(t, err)
	}
	pf := &Prefetch{Archive: a, Prefetch: spool.Prefetch{Spool: filepath.Join(c.dir, "pg_wal", "pipe-spool", "fetch"), Ahead: 4, SegmentSize: testSegSize, Log: discard()}}
	spooled := func(n uint64) bool {
		_, err := os.Stat(filepath.Join(pf.Dir(testSysID), name(1, n)))
		return err == nil
	}
	waitFor := func(n uint64) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !spooled(n); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was not prefetched", name(1, n))
			}
		}
	}
	// Recovery asked for 1 (fetched from the store): the prefetcher
	// keeps 2 to 5 spooled, then follows recovery as it takes them.
	done := make(chan error, 1)
	go func() { done <- pf.Run(ctx, testSysID, name(1, 1)) }()
	waitFor(5)
	if spooled(6) {
		t.Error("prefetched more than 4 ahead")
	}
	if pf.Run(ctx, testSysID, name(1, 1)) != spool.ErrBusy {
		t.Error("a second prefetcher ran beside the first")
	}
	dest := filepath.Join(c.dir, "pg_wal", "RECOVERYXLOG")
	for n := uint64(2); n <= 12; n++ {
		waitFor(n)
		ok, err := pf.Take(testSysID, name(1, n), dest)
		if err != nil || !ok {
			t.Fatalf("Take %s: %v, %v", name(1, n), ok, err)
		}
		got, err := os.ReadFile(dest)
		must(t, err)
		if !bytes.Equal(got, segs[name(1, n)]) {
			t.Fatalf("%s from the spool differs", name(1, n))
		}
	}
	// 13 is not archived: recovery asks for it, and the prefetcher ends.
	if ok, _ := pf.Take(testSysID, name(1, 13), dest); ok {
		t.Error("took a segment that was never archived")
	}
	select {
	case err := <-done:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the prefetcher did not end at the end of the archive")
	}
	left, _ := filepath.Glob(filepath.Join(pf.Dir(testSysID), strings.Repeat("?", 24))) // segments; the notes of those found missing stay
	if len(left) != 0 {
		t.Errorf("spool holds %v", left)
	}
	// Replay moved on without the spool: older spooled segments go.
	must(t, os.WriteFile(filepath.Join(pf.Dir(testSysID), name(1, 3)), []byte("x"), 0o600))
	if ok, err := pf.Take(testSysID, name(1, 5), dest); ok || err != nil {
		t.Errorf("Take of a segment not spooled: %v, %v", ok, err)
	}
	if spooled(3) {
		t.Error("a spooled segment replay has passed was kept")
	}
}

// archivedPrefetch is a cluster whose archive holds segments 1 to n of
// timeline 1, and a prefetch of ahead segments into its spool.
func archivedPrefetch(ctx context.Context, t *testing.T, n uint64, ahead int) (*cluster, *Prefetch) {
	t.Helper()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	for i := uint64(1); i <= n; i++ {
		_, err := a.Push(ctx, c.write(t, name(1, i), segment(testSysID, 1, i)))
		must(t, err)
	}
	return c, &Prefetch{Archive: a, Prefetch: spool.Prefetch{Spool: filepath.Join(c.dir, "pg_wal", "pipe-spool", "fetch"), Ahead: ahead, SegmentSize: testSegSize, Log: discard()}}
}

// A prefetcher whose timeline recovery left (it asks for a segment of
// another one) ends, rather than keep fetches of the new timeline
// waiting for it until it idles out.
func TestPrefetchLeavesTimeline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	defer func(idle time.Duration) { prefetchIdle = idle }(prefetchIdle)
	prefetchIdle = time.Hour
	c, pf := archivedPrefetch(ctx, t, 6, 3)
	done := make(chan error, 1)
	go func() { done <- pf.Run(ctx, testSysID, name(1, 1)) }()
	for !pf.Running() {
		time.Sleep(5 * time.Millisecond)
	}
	if ok, err := pf.Take(testSysID, name(2, 4), filepath.Join(c.dir, "pg_wal", "RECOVERYXLOG")); ok || err != nil {
		t.Fatalf("took %s of timeline 2: %v, %v", name(2, 4), ok, err)
	}
	select {
	case err := <-done:
		must(t, err)
	case <-ctx.Done():
		t.Fatal("the prefetcher of timeline 1 kept running after recovery asked for timeline 2")
	}
}

// Where a background process may run, AnswerFetch (pipe-wal fetch) starts
// the prefetcher itself: recovery's first fetch, of a segment not spooled,
// has the prefetcher bring that segment too and takes it from the spool,
// so no pipe that opens a store runs beside the prefetcher. The next
// fetches take theirs as the prefetcher brings them; past the end of the
// archive, and when the prefetcher started exits without the segment, it
// hands over (false) instead of waiting.
func TestAnswerFetchStartsPrefetcher(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := newCluster(t, testSysID)
	root := filepath.Join(t.TempDir(), "wal")
	a := newArchive(t, root, c)
	segs := map[string][]byte{}
	for n := uint64(1); n <= 6; n++ {
		segs[name(1, n)] = segment(testSysID, 1, n)
		_, err := a.Push(ctx, c.write(t, name(1, n), segs[name(1, n)]))
		must(t, err)
	}
	defer func(idle time.Duration) { prefetchIdle = idle }(prefetchIdle)
	prefetchIdle = time.Hour // what the prefetcher would wait for
	var mu sync.Mutex
	var after []string // each prefetcher's --prefetch-after
	var running sync.WaitGroup
	defer running.Wait()
	opened := 0
	cmd := &Command{Command: spool.Command{DataDir: c.dir, Log: discard(),
		Settings: spool.Settings{Background: spool.BackgroundAlways, Prefetch: 3, FetchSpool: "pg_wal/pipe-spool/fetch", SegmentSize: testSegSize}},
		Open: func(context.Context) (*Archive, func(), error) {
			mu.Lock()
			opened++
			mu.Unlock()
			return newArchive(t, root, c), func() {}, nil
		},
	}
	// The prefetcher pipe would run, in a goroutine.
	cmd.Spawn = func(args []string, _ string) (<-chan struct{}, error) {
		if len(args) < 4 || args[2] != "--prefetch-after" {
			t.Fatalf("started %v", args)
		}
		mu.Lock()
		after = append(after, args[3])
		mu.Unlock()
		exited := make(chan struct{})
		running.Go(func() {
			defer close(exited)
			if err := cmd.RunPrefetcher(ctx, args[3]); err != nil {
				t.Error(err)
			}
		})
		return exited, nil
	}
	dest := filepath.Join(c.dir, "pg_wal", "RECOVERYXLOG")
	for n := uint64(1); n <= 6; n++ {
		if !cmd.AnswerFetch(ctx, name(1, n), dest) {
			t.Fatalf("AnswerFetch %s handed over", name(1, n))
		}
		got, err := os.ReadFile(dest)
		must(t, err)
		if !bytes.Equal(got, segs[name(1, n)]) {
			t.Fatalf("%s from the spool differs", name(1, n))
		}
	}
	mu.Lock()
	if !slices.Equal(after, []string{name(1, 0)}) || opened != 1 {
		t.Errorf("prefetchers started after %v, stores opened %d: want one prefetcher, after %s (it opens the only store)", after, opened, name(1, 0))
	}
	mu.Unlock()
	// 7 is not archived: handed over once the prefetcher found it
	// missing, not after its idle time; asked again (a standby polls), it
	// is handed over at once, without a prefetcher that would only find
	// it missing again.
	for range 3 {
		if cmd.AnswerFetch(ctx, name(1, 7), dest) {
			t.Fatal("AnswerFetch answered for a segment not archived")
		}
		if ctx.Err() != nil {
			t.Fatal("AnswerFetch of a segment not archived waited for the prefetcher's idle time")
		}
	}
	running.Wait()
	if mu.Lock(); len(after) != 1 {
		t.Errorf("prefetchers started after %v: the end of the archive started more", after)
	}
	mu.Unlock()
	// A prefetcher that exits without bringing anything: handed over.
	started := 0
	cmd.Spawn = func([]string, string) (<-chan struct{}, error) {
		started++
		exited := make(chan struct{})
		close(exited)
		return exited, nil
	}
	if cmd.AnswerFetch(ctx, name(1, 20), dest) || ctx.Err() != nil || started != 1 {
		t.Errorf("AnswerFetch answered, or waited on, a prefetcher that exited at once (%d started)", started)
	}
}

// gaugedStore counts the objects open at once, each held open a moment so
// that fetches started together overlap, and the order in which fetches
// start (fetching, as Prefetch.onFetch). Opens wait (at most a few seconds)
// until PrefetchAtOnce fetches have started, so no fetch ends, and lets
// another start, before the first ones did: a fetch the scheduler ran
// late does not pass for one started late.
type gaugedStore struct {
	Store
	mu         sync.Mutex
	open, most int
	started    []string      // the files fetched, in order
	firstOnes  chan struct{} // closed once PrefetchAtOnce fetches started
}

func (g *gaugedStore) fetching(seg string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.started = append(g.started, seg)
	if len(g.started) == PrefetchAtOnce {
		close(g.firstOnes)
	}
}

func (g *gaugedStore) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	select {
	case <-g.firstOnes:
	case <-time.After(5 * time.Second):
	}
	g.mu.Lock()
	g.open++
	g.most = max(g.most, g.open)
	g.mu.Unlock()
	time.Sleep(20 * time.Millisecond)
	rc, err := g.Store.Open(ctx, key)
	g.mu.Lock()
	g.open--
	g.mu.Unlock()
	return rc, err
}

// A prefetch of more segments than PrefetchAtOnce fetches that many at
// once, oldest first, both ways: the segment recovery needs next must not
// wait behind the whole window.
func TestPrefetchAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 2*PrefetchAtOnce + 2
	for _, way := range []string{"Batch", "Run"} {
		t.Run(way, func(t *testing.T) {
			_, pf := archivedPrefetch(ctx, t, n, n-1)
			g := &gaugedStore{Store: pf.Archive.Store, firstOnes: make(chan struct{})}
			pf.Archive.Store = g
			pf.onFetch = g.fetching
			if way == "Batch" {
				pf.Batch(ctx, testSysID, name(1, 1))
			} else {
				go func() {
					// Recovery takes nothing: once the prefetcher has
					// filled its window, recovery moves past the end of
					// the archive and the prefetcher ends.
					for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
						if ents, _ := filepath.Glob(filepath.Join(pf.Dir(testSysID), strings.Repeat("?", 24))); len(ents) == n-1 {
							break
						}
					}
					if err := os.WriteFile(filepath.Join(pf.Dir(testSysID), spool.PositionFile), []byte(name(1, n+1)), 0o600); err != nil { // past the end: it ends
						t.Error(err)
					}
				}()
				defer func(idle time.Duration) { prefetchIdle = idle }(prefetchIdle)
				prefetchIdle = time.Hour
				must(t, pf.Run(ctx, testSysID, name(1, 1)))
			}
			ents, _ := filepath.Glob(filepath.Join(pf.Dir(testSysID), strings.Repeat("?", 24)))
			if len(ents) != n-1 {
				t.Fatalf("spooled %d segments, want %d", len(ents), n-1)
			}
			if g.most > PrefetchAtOnce || g.most < 2 {
				t.Errorf("%d objects open at once, want 2 to %d", g.most, PrefetchAtOnce)
			}
			// The first PrefetchAtOnce started are the oldest ones, in
			// any order; the next one waited for one of them to end.
			first := map[string]bool{}
			for i := uint64(2); i < 2+PrefetchAtOnce; i++ {
				first[name(1, i)] = true
			}
			for _, seg := range g.started[:PrefetchAtOnce] {
				if !first[seg] {
					t.Errorf("started %s among the first %d, want segments 2 to %d", seg, PrefetchAtOnce, 1+PrefetchAtOnce)
				}
			}
		})
	}
}

// listingStore records the prefixes listed.
type listingStore struct {
	Store
	mu    sync.Mutex
	lists []string
}

func (l *listingStore) List(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error) {
	l.mu.Lock()
	l.lists = append(l.lists, path.Base(prefix))
	l.mu.Unlock()
	return l.Store.List(ctx, prefix)
}

// A prefetch looks segments up sixteen at a time, one List for the names
// that differ only in their last digit, however many fetch at once; a
// segment it did not see listed, or asks for again, is listed again:
// one archived since is found.
func TestPrefetchListsGroups(t *testing.T) {
	ctx := context.Background()
	for _, way := range []string{"Batch", "Run"} {
		t.Run(way, func(t *testing.T) {
			c, pf := archivedPrefetch(ctx, t, 20, 19)
			ls := &listingStore{Store: pf.Archive.Store}
			pf.Archive.Store = ls
			var listed []string // before the prefetch looked past 20
			if way == "Batch" {
				pf.Batch(ctx, testSysID, name(1, 1))
				listed = ls.lists
			} else {
				seen := make(chan []string, 1)
				go func() {
					for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
						if ents, _ := filepath.Glob(filepath.Join(pf.Dir(testSysID), strings.Repeat("?", 24))); len(ents) == 19 {
							break
						}
					}
					ls.mu.Lock()
					seen <- slices.Clone(ls.lists)
					ls.mu.Unlock()
					if err := os.WriteFile(filepath.Join(pf.Dir(testSysID), spool.PositionFile), []byte(name(1, 21)), 0o600); err != nil { // past the end: it ends
						t.Error(err)
					}
				}()
				must(t, pf.Run(ctx, testSysID, name(1, 1)))
				listed = <-seen
			}
			if ents, _ := filepath.Glob(filepath.Join(pf.Dir(testSysID), strings.Repeat("?", 24))); len(ents) != 19 {
				t.Fatalf("spooled %d segments, want 19", len(ents))
			}
			// Segments 2 to 15 and 16 to 20 (0x10 to 0x14).
			if want := []string{name(1, 2)[:23], name(1, 16)[:23]}; !slices.Equal(listed, want) {
				t.Errorf("listed %v, want %v", listed, want)
			}
			// Archived after the List: found.
			_, err := pf.Archive.Push(ctx, c.write(t, name(1, 21), segment(testSysID, 1, 21)))
			must(t, err)
			dest := filepath.Join(t.TempDir(), "x")
			must(t, pf.Archive.spoolTo(ctx, testSysID, name(1, 21), dest, false, &pf.lists))
			// Asked for again: listed again, not answered from the List
			// that found it.
			ls.lists = nil
			must(t, pf.Archive.spoolTo(ctx, testSysID, name(1, 21), dest, false, &pf.lists))
			if len(ls.lists) != 1 {
				t.Errorf("a segment asked for again was listed %d times, want once", len(ls.lists))
			}
		})
	}
}

// Pushes look their files up sixteen at a time too: one List for the
// names that differ only in their last digit, whose claims decide for
// what was archived after it. A file archived since is still found
// (pushed again: archived already), and other content still refused.
func TestPushListsGroups(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	ls := &listingStore{Store: a.Store}
	a.Store = ls
	for i := uint64(1); i <= 20; i++ {
		r, err := a.Push(ctx, c.write(t, name(1, i), segment(testSysID, 1, i)))
		must(t, err)
		if r.Already {
			t.Fatalf("%s: archived already, in an empty archive", name(1, i))
		}
	}
	if want := []string{name(1, 1)[:23], name(1, 16)[:23]}; !slices.Equal(ls.lists, want) {
		t.Errorf("listed %v, want %v", ls.lists, want)
	}
	f, _ := walname.ParseName(name(1, 3))
	if r, err := a.PushData(ctx, f, segment(testSysID, 1, 3)); err != nil || !r.Already {
		t.Errorf("a file archived after its group's List, again: %+v, %v; want archived already", r, err)
	}
	if _, err := a.PushData(ctx, f, segment(testSysID, 1, 1003)); !errors.Is(err, ErrConflict) {
		t.Errorf("other content under a name archived after its group's List: %v, want ErrConflict", err)
	}
	// An object archived before claims existed (none beside it) is found
	// by its group's List.
	old, _ := walname.ParseName(name(1, 33))
	_, err := a.PushData(ctx, old, segment(testSysID, 1, 33))
	must(t, err)
	must(t, os.Remove(filepath.Join(a.Root, walname.Dir(testSysID, 1), old.Name+ClaimExt)))
	b := newArchive(t, strings.TrimSuffix(a.Root, "/"), c)
	if _, err := b.PushData(ctx, old, segment(testSysID, 1, 1033)); !errors.Is(err, ErrConflict) {
		t.Errorf("other content under a name archived without a claim: %v, want ErrConflict", err)
	}
	if r, err := b.PushData(ctx, old, segment(testSysID, 1, 33)); err != nil || !r.Already {
		t.Errorf("the content archived without a claim, again: %+v, %v; want archived already", r, err)
	}
}

// Where nothing may outlive restore_command, recovery played as
// PostgreSQL runs it (pipe-wal fetch, handing over to pipe wal fetch what
// it does not answer) fetches the segments after one only when the next
// is not spooled: one batch per window, each segment byte for byte; a
// segment spooled further ahead does not hold a batch back.
func TestFetchBatchesWhenNextMissing(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	root := filepath.Join(t.TempDir(), "wal")
	a := newArchive(t, root, c)
	segs := map[string][]byte{}
	for n := uint64(1); n <= 12; n++ {
		segs[name(1, n)] = segment(testSysID, 1, n)
		_, err := a.Push(ctx, c.write(t, name(1, n), segs[name(1, n)]))
		must(t, err)
	}
	cmd := &Command{Command: spool.Command{DataDir: c.dir, Log: discard(),
		Settings: spool.Settings{Background: spool.BackgroundNever, Prefetch: 4, FetchSpool: "pg_wal/pipe-spool/fetch", SegmentSize: testSegSize}},
		Open: func(context.Context) (*Archive, func(), error) { return newArchive(t, root, c), func() {}, nil },
	}
	dest := filepath.Join(c.dir, "pg_wal", "RECOVERYXLOG")
	var handed []uint64
	replay := func(from, to uint64) {
		t.Helper()
		handed = nil
		for n := from; n <= to; n++ {
			if !cmd.AnswerFetch(ctx, name(1, n), dest) {
				handed = append(handed, n)
				if _, err := cmd.Fetch(ctx, name(1, n), dest); err != nil {
					t.Fatalf("Fetch %s: %v", name(1, n), err)
				}
			}
			got, err := os.ReadFile(dest)
			must(t, err)
			if !bytes.Equal(got, segs[name(1, n)]) {
				t.Fatalf("%s restored differs", name(1, n))
			}
			must(t, os.Remove(dest))
		}
	}
	replay(1, 12)
	// 1 is not spooled; 5 and 9 are, but the one after each is not. 13
	// is not archived: the batch from 9 finds the end, and 10 to 12 are
	// answered from the spool.
	if !slices.Equal(handed, []uint64{1, 5, 9}) {
		t.Errorf("handed over to pipe for %v, want 1, 5 and 9", handed)
	}
	// A recovery again from 1, with 4 left in the spool: the fetch of 1
	// brings 2, 3 and 5 with it, 2 to 4 are answered, and 5, whose next
	// is not spooled, fetches the window after it.
	must(t, os.RemoveAll(cmd.InData(cmd.Settings.FetchSpool)))
	dir := cmd.Prefetch().Dir(testSysID)
	must(t, os.MkdirAll(dir, 0o700))
	must(t, os.WriteFile(filepath.Join(dir, name(1, 4)), segs[name(1, 4)], 0o600))
	replay(1, 5)
	if !slices.Equal(handed, []uint64{1, 5}) {
		t.Errorf("with 4 spooled, handed over to pipe for %v, want 1 and 5", handed)
	}
	// No prefetcher follows recovery here: no command noted its position.
	if _, err := os.Stat(filepath.Join(dir, spool.PositionFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("restore_command noted recovery's position where no prefetcher may run (%v)", err)
	}
}

// Batch, where nothing may outlive restore_command, spools the segments
// after the one asked for and stops at the end of the archive.
func TestPrefetchBatch(t *testing.T) {
	ctx := context.Background()
	_, pf := archivedPrefetch(ctx, t, 6, 4)
	spooled := func() []string {
		var out []string
		ents, _ := os.ReadDir(pf.Dir(testSysID))
		for _, e := range ents {
			if len(e.Name()) == 24 {
				out = append(out, e.Name())
			}
		}
		return out
	}
	pf.Batch(ctx, testSysID, name(1, 1))
	if got, want := strings.Join(spooled(), " "), strings.Join([]string{name(1, 2), name(1, 3), name(1, 4), name(1, 5)}, " "); got != want {
		t.Fatalf("spooled %s, want %s", got, want)
	}
	// Past the end: 7 to 9 are not archived, and nothing else is spooled.
	pf.Batch(ctx, testSysID, name(1, 5))
	if got := spooled(); len(got) != 5 || got[4] != name(1, 6) {
		t.Fatalf("spooled %v, want 2 to 6", got)
	}
	// The end found, the segments after it count no more: the fetches
	// of 5 and 6 take theirs from the spool, not the store (with 7 to 10
	// counted, none of the 4 after 6 would be spooled).
	for _, n := range []uint64{5, 6} {
		if next := pf.Next(testSysID, name(1, n)); len(next) != 0 {
			t.Errorf("after the end was found, Next(%s) = %v, want none", name(1, n), next)
		}
	}
	// A mark of the end older than spool.EndFresh says nothing: the archive
	// may have grown since.
	old := time.Now().Add(-2 * spool.EndFresh)
	marks, _ := filepath.Glob(filepath.Join(pf.Dir(testSysID), "*"+spool.EndExt))
	if len(marks) != 3 {
		t.Errorf("marks of the end %v, want 7 to 9's", marks)
	}
	for _, m := range marks {
		must(t, os.Chtimes(m, old, old))
	}
	if next := pf.Next(testSysID, name(1, 6)); len(next) != 4 || next[0] != name(1, 7) {
		t.Errorf("with the end's mark stale, Next(%s) = %v, want 7 to 10", name(1, 6), next)
	}
	// A prefetcher at work: Batch leaves it alone.
	l, err := spool.Lock(pf.Spool, spool.PrefetchLock)
	must(t, err)
	defer l.Close()
	must(t, os.Remove(filepath.Join(pf.Dir(testSysID), name(1, 6))))
	pf.Batch(ctx, testSysID, name(1, 5))
	if len(spooled()) != 4 {
		t.Error("Batch fetched while another process held the prefetch lock")
	}
}

// Every read of the store's objects is bounded and checked as it
// streams: an object larger than any of the archive's is refused after
// that many bytes, by verify without a key and by fetch; one whose bytes
// are not those its name says is refused, and fetch leaves no file.
func TestReadBounded(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	data := segment(testSysID, 1, 9)
	r, err := a.Push(ctx, c.write(t, name(1, 9), data))
	must(t, err)
	o, err := walname.ParseObject(filepath.Base(r.Key))
	must(t, err)
	good := a.Store
	a.Store = hugeStore{good}
	if _, err := a.storedDigest(ctx, o, r.Key); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Errorf("the digest of a huge object: %v", err)
	}
	if err := a.read(ctx, o, r.Key, io.Discard); err == nil || !strings.Contains(err.Error(), "larger") {
		t.Errorf("reading a huge object: %v", err)
	}
	rc, err := good.Open(ctx, r.Key)
	must(t, err)
	stored, err := io.ReadAll(rc)
	rc.Close()
	must(t, err)
	for what, body := range map[string][]byte{
		"cut short": stored[:len(stored)-1], "one byte more": append(slices.Clone(stored), 0), "a byte changed": append([]byte{stored[0] ^ 1}, stored[1:]...),
	} {
		for _, at := range []bool{false, true} {
			a.Store = bodyStore{good, body, at}
			dest := filepath.Join(t.TempDir(), name(1, 9))
			if err := a.Fetch(ctx, name(1, 9), dest); err == nil || !strings.Contains(err.Error(), "digest in its name") {
				t.Errorf("%s: fetch says %v, want the digest in the name named", what, err)
			}
			// A prefetch downloads to the spool first (through WriteAtTo
			// where the store's reader has it), then decodes.
			if err := a.spoolTo(ctx, testSysID, name(1, 9), dest, false, nil); err == nil || !strings.Contains(err.Error(), "digest in its name") {
				t.Errorf("%s (WriteAtTo %v): a prefetch says %v, want the digest in the name named", what, at, err)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dest)); len(ents) != 0 {
				t.Errorf("%s: fetch left %v", what, ents)
			}
		}
	}
	for _, at := range []bool{false, true} {
		a.Store = bodyStore{good, stored, at}
		dest := filepath.Join(t.TempDir(), name(1, 9))
		must(t, a.spoolTo(ctx, testSysID, name(1, 9), dest, false, nil))
		if got, err := os.ReadFile(dest); err != nil || !bytes.Equal(got, data) {
			t.Errorf("a prefetch (WriteAtTo %v) wrote %d bytes (%v), not the segment", at, len(got), err)
		}
	}
	a.Store = good
	got, err := a.FetchData(ctx, name(1, 9))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("fetched %d bytes, %v", len(got), err)
	}
}

// bodyStore's objects all hold body; at, read through a reader that
// writes into a file at offsets, as the object stores' does.
type bodyStore struct {
	Store
	body []byte
	at   bool
}

func (s bodyStore) Open(context.Context, string) (io.ReadCloser, error) {
	if s.at {
		return atReader{io.NopCloser(bytes.NewReader(s.body)), s.body}, nil
	}
	return io.NopCloser(bytes.NewReader(s.body)), nil
}

type atReader struct {
	io.ReadCloser
	body []byte
}

func (r atReader) Size() int64 { return int64(len(r.body)) }

func (r atReader) WriteAtTo(w io.WriterAt) (int64, error) {
	n, err := w.WriteAt(r.body, 0)
	return int64(n), err
}

type hugeStore struct{ Store }

func (hugeStore) Open(context.Context, string) (io.ReadCloser, error) {
	return io.NopCloser(io.LimitReader(zeros{}, MaxFile+10)), nil
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// FetchData returns the contents of the archived file name, through the
// checks Fetch makes.
func (a *Archive) FetchData(ctx context.Context, name string) ([]byte, error) {
	if _, err := walname.ParseName(name); err != nil {
		return nil, err
	}
	id, err := a.FetchSystemID(ctx)
	if err != nil {
		return nil, err
	}
	o, key, err := a.locate(ctx, id, name, nil)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = a.read(ctx, o, key, &b)
	return b.Bytes(), err
}

// TestSHA256Named: an object archived before XXH3 names the file by its
// SHA-256. A fetch checks what it decodes with that digest, a push of the
// same file finds it archived, a push of other content is refused, and
// list and verify take it as any other.
func TestSHA256Named(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t, testSysID)
	a := newArchive(t, filepath.Join(t.TempDir(), "wal"), c)
	data := segment(testSysID, 1, 1)
	p := c.write(t, name(1, 1), data)
	r, err := a.Push(ctx, p)
	must(t, err)
	o, err := walname.ParseObject(filepath.Base(r.Key))
	must(t, err)
	if len(o.FileSum) != 32 || o.FileSum != fileDigest(data) {
		t.Fatalf("a new object's file digest is %s, want XXH3-128's %s", o.FileSum, fileDigest(data))
	}
	old := filepath.Join(filepath.Dir(r.Key), walname.ObjectName(o.Name, objectDigest(data), o.StoredSum, o.Ext))
	must(t, os.Rename(r.Key, old))
	if po, err := walname.ParseObject(filepath.Base(old)); err != nil || po.FileSum != objectDigest(data) {
		t.Fatalf("the SHA-256 named object parses as %+v (%v)", po, err)
	}

	dest := filepath.Join(c.dir, "pg_wal", "RECOVERYXLOG")
	must(t, a.Fetch(ctx, name(1, 1), dest))
	if got, err := os.ReadFile(dest); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("fetched %d bytes (%v), not the segment", len(got), err)
	}
	again, err := a.Push(ctx, p)
	if err != nil || !again.Already || again.Key != old {
		t.Errorf("pushing the same file again: %+v %v, want the SHA-256 named object, already", again, err)
	}
	if _, err := a.Push(ctx, c.write(t, name(1, 1), segment(testSysID, 1, 2))); !errors.Is(err, ErrConflict) {
		t.Errorf("pushing other content under its name: %v, want ErrConflict", err)
	}
	l, err := a.List(ctx)
	must(t, err)
	if len(l.Entries) != 1 || len(l.Duplicates) != 0 {
		t.Errorf("List: %d entries, duplicates %v", len(l.Entries), l.Duplicates)
	}

	// The SHA-256 of other bytes in its name: the decoded file is refused.
	must(t, os.Rename(old, filepath.Join(filepath.Dir(old), walname.ObjectName(o.Name, objectDigest(segment(testSysID, 1, 2)), o.StoredSum, o.Ext))))
	must(t, os.Remove(dest))
	if err := a.Fetch(ctx, name(1, 1), dest); err == nil || !strings.Contains(err.Error(), "decodes to other bytes") {
		t.Errorf("fetching an object whose SHA-256 names other bytes: %v", err)
	}
}

// backupLabel is a backup history file as pg_backup_stop writes it, for
// a backup on timeline tli from start to stop.
func backupLabel(tli uint32, start, stop uint64) string {
	file := func(lsn uint64) string { return walname.SegmentName(tli, lsn/testSegSize, testSegSize) }
	return fmt.Sprintf("START WAL LOCATION: %s (file %s)\nSTOP WAL LOCATION: %s (file %s)\nCHECKPOINT LOCATION: %s\nBACKUP METHOD: streamed\nBACKUP FROM: primary\nSTART TIME: 2026-11-28 10:00:00 UTC\nLABEL: pipe\nSTART TIMELINE: %d\nSTOP TIME: 2026-11-28 10:00:01 UTC\nSTOP TIMELINE: %d\n",
		FormatLSN(start), file(start), FormatLSN(stop), file(stop), FormatLSN(start), tli, tli)
}
