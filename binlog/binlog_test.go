package binlog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/pipebackup/pipe/internal/binlogfile"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/fs"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/dedup"
	"github.com/pipebackup/pipe/stages/encrypt"
)

// fsStore is the fs storage plugin, in a folder of the test's.
type fsStore struct {
	sdk.Sink
	sdk.Storage
}

func newStore(t *testing.T) (*fsStore, string) {
	t.Helper()
	dir := t.TempDir()
	s, d := fs.SinkType{}.Configure(context.Background(), sdk.NewConfig(map[string]any{"path": dir + "/"}))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return &fsStore{Sink: s, Storage: s.(sdk.Storage)}, dir
}

// event is one binlog event of size bytes: a header, then filler.
func event(ts uint32, typ byte, server uint32, size int, body []byte) []byte {
	b := make([]byte, size)
	binary.LittleEndian.PutUint32(b[0:], ts)
	b[4] = typ
	binary.LittleEndian.PutUint32(b[5:], server)
	binary.LittleEndian.PutUint32(b[9:], uint32(size))
	copy(b[19:], body)
	return b
}

// gtid is a GTID event's body.
func gtid(domain uint32, seq uint64) []byte {
	b := make([]byte, 12)
	binary.LittleEndian.PutUint64(b, seq)
	binary.LittleEndian.PutUint32(b[8:], domain)
	return b
}

// binlogDir is a server's binlog folder: files mysql-bin.000001.. with
// the index.
type binlogDir struct {
	t    *testing.T
	base string
}

func newBinlogDir(t *testing.T) *binlogDir {
	return &binlogDir{t: t, base: filepath.Join(t.TempDir(), "mysql-bin")}
}

// open starts file n with a format description event of server 7 whose
// in-use flag is set.
func (d *binlogDir) open(n int) string {
	name := filepath.Base(d.base) + "." + strings.Repeat("0", 5) + string(rune('0'+n))
	fde := event(1000, 15, 7, 120, nil)
	fde[17] = 1 // LOG_EVENT_BINLOG_IN_USE_F
	d.append(name, append([]byte{0xfe, 'b', 'i', 'n'}, fde...))
	f, err := os.OpenFile(d.base+".index", os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	f.WriteString("./" + name + "\n")
	f.Close()
	return name
}

func (d *binlogDir) append(name string, b []byte) {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(d.base), name), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		d.t.Fatal(err)
	}
	f.Close()
}

// close clears a file's in-use flag, as the server does.
func (d *binlogDir) close(name string) {
	f, err := os.OpenFile(filepath.Join(filepath.Dir(d.base), name), os.O_RDWR, 0)
	if err != nil {
		d.t.Fatal(err)
	}
	defer f.Close()
	if err := binlogfile.ClearInUse(f); err != nil {
		d.t.Fatal(err)
	}
}

func (d *binlogDir) read(name string) []byte {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(d.base), name))
	if err != nil {
		d.t.Fatal(err)
	}
	return b
}

// keys are an age key pair's sealing and opening formats, zstd.
func keys(t *testing.T) (seal, open dedup.Format) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	zstd, _ := compress.Lookup("zstd")
	return dedup.Format{Codec: zstd, Level: 3, Keys: encrypt.Keys{Recipients: []age.Recipient{id.Recipient()}}},
		dedup.Format{Codec: zstd, Keys: encrypt.Keys{Identities: []age.Identity{id}}}
}

// TestArchiver: the files a server left go whole, the one it writes in
// parts and after max_lag; a second archiver goes on where the first
// stopped; fetch gives the server's files back byte for byte, the closed
// ones with their in-use flag cleared; verify finds a changed object and
// a missing file.
func TestArchiver(t *testing.T) {
	ctx := context.Background()
	store, root := newStore(t)
	seal, open := keys(t)
	ar := &Archive{Store: store, Root: root + "/", Seal: seal, Ext: ".zst.age", Exclusive: true}
	d := newBinlogDir(t)
	first := d.open(1)
	for i := range 40 {
		d.append(first, event(1000+uint32(i), binlogfile.GTIDEvent, 7, 1000, gtid(0, uint64(i+1))))
	}
	r := &Archiver{Archive: ar, Base: d.base, MaxLag: 50 * time.Millisecond, PartSize: 16 << 10, Log: slog.New(slog.DiscardHandler)}
	if err := r.Run(ctx, true); err != nil {
		t.Fatal(err)
	}
	if r.Segments.Load() != 3 || r.Stored.Load() != int64(len(d.read(first))) {
		t.Fatalf("stored %d bytes in %d segments, want %d in 3 (16 KiB parts)", r.Stored.Load(), r.Segments.Load(), len(d.read(first)))
	}
	// The server writes on: a new archiver (a restart) keeps back a short
	// tail until max_lag, then stores it.
	d.append(first, event(2000, 2, 7, 500, nil))
	r2 := &Archiver{Archive: ar, Base: d.base, MaxLag: 150 * time.Millisecond, PartSize: 16 << 10, Log: slog.New(slog.DiscardHandler)}
	files, _ := r2.Files()
	sealer, _ := seal.NewSealer()
	if err := r2.start(ctx, files); err != nil {
		t.Fatal(err)
	}
	if err := r2.pass(ctx, sealer, files, false); err != nil {
		t.Fatal(err)
	}
	if r2.Segments.Load() != 0 || r2.LagNanos.Load() == 0 {
		t.Fatalf("a tail younger than max_lag was stored (%d segments), or no lag shows (%d)", r2.Segments.Load(), r2.LagNanos.Load())
	}
	time.Sleep(200 * time.Millisecond)
	if err := r2.pass(ctx, sealer, files, false); err != nil {
		t.Fatal(err)
	}
	if r2.Segments.Load() != 1 || r2.Stored.Load() != 500 || r2.LagNanos.Load() != 0 {
		t.Fatalf("after max_lag: %d segments, %d bytes, lag %d; want the 500-byte tail, lag 0", r2.Segments.Load(), r2.Stored.Load(), r2.LagNanos.Load())
	}
	// Rotation: the first file is closed, the second started.
	d.close(first)
	second := d.open(2)
	d.append(second, event(3000, binlogfile.GTIDEvent, 7, 300, gtid(0, 41)))
	if err := r2.Run(ctx, true); err != nil {
		t.Fatal(err)
	}

	reader := &Archive{Store: store, Root: root + "/", Open: open, Ext: ".zst.age"}
	l, err := reader.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Servers[7]) != 2 || len(l.Foreign) != 0 {
		t.Fatalf("listing: %+v", l)
	}
	out := t.TempDir()
	for _, name := range []string{first, second} {
		n, err := reader.Fetch(ctx, l, 7, name, filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(filepath.Join(out, name))
		if want := d.read(name); !bytes.Equal(got, want) || n != int64(len(want)) {
			t.Errorf("%s fetched differs from the server's (%d bytes, want %d)", name, n, len(want))
		}
	}
	if _, err := reader.Fetch(ctx, l, 7, "mysql-bin.000003", filepath.Join(out, "x")); !errors.Is(err, ErrNotArchived) {
		t.Fatalf("a file not archived: %v", err)
	}
	// The GTIDs of the fetched first file, in order.
	f, _ := os.Open(filepath.Join(out, first))
	var seqs []uint64
	binlogfile.Scan(f, 0, func(e binlogfile.Event) bool {
		if e.Type == binlogfile.GTIDEvent {
			seqs = append(seqs, e.Seq)
		}
		return true
	})
	f.Close()
	if len(seqs) != 40 || seqs[0] != 1 || seqs[39] != 40 {
		t.Fatalf("GTIDs read back: %v", seqs)
	}

	if problems, n, err := reader.Verify(ctx, l, true); err != nil || len(problems) != 0 || n != 5 {
		t.Fatalf("verify of a good archive: %v, %d segments, %v", problems, n, err)
	}
	// A flipped byte in one object, and a third file whose predecessor
	// is missing.
	seg := l.Servers[7][0].Segments[1]
	p := seg.Key
	b, _ := os.ReadFile(p)
	b[len(b)/2] ^= 1
	os.WriteFile(p, b, 0o644)
	if _, err := ar.Put(ctx, sealer, 7, "mysql-bin.000004", 0, []byte{0xfe, 'b', 'i', 'n'}); err != nil {
		t.Fatal(err)
	}
	l, _ = reader.List(ctx)
	problems, _, err := reader.Verify(ctx, l, false)
	if err != nil {
		t.Fatal(err)
	}
	var saw []string
	for _, p := range problems {
		saw = append(saw, p.Key+": "+p.What)
	}
	all := strings.Join(saw, "\n")
	if len(problems) != 2 || !strings.Contains(all, "is damaged") || !strings.Contains(all, "mysql-bin.000003: missing") {
		t.Fatalf("verify found:\n%s", all)
	}
	if _, err := reader.Fetch(ctx, l, 7, first, filepath.Join(out, "again")); err == nil || !strings.Contains(err.Error(), "is damaged") {
		t.Fatalf("fetch of a damaged file: %v", err)
	}

	// The archive holds files 1, 2 and 4 (the verify above): the server
	// purges its files while no archiver runs, and writes file 6; the
	// next archiver says file 5 is gone, and archives file 6.
	for _, n := range []string{first, second} {
		os.Remove(filepath.Join(filepath.Dir(d.base), n))
	}
	os.Remove(d.base + ".index")
	sixth := d.open(6)
	r3 := &Archiver{Archive: ar, Base: d.base, MaxLag: time.Second, PartSize: 16 << 10, Log: slog.New(slog.DiscardHandler)}
	if err := r3.Run(ctx, true); err != nil {
		t.Fatal(err)
	}
	if r3.Gaps.Load() != 1 || r3.Stored.Load() != int64(len(d.read(sixth))) {
		t.Fatalf("after a purge: %d gaps, %d bytes stored; want 1 and file 6's %d", r3.Gaps.Load(), r3.Stored.Load(), len(d.read(sixth)))
	}
}

// TestCover: overlapping and repeated segments count once, a hole is a
// gap.
func TestCover(t *testing.T) {
	f := &File{Segments: []Segment{{Start: 100, End: 200}, {Start: 0, End: 100}, {Start: 0, End: 50}, {Start: 300, End: 400}}}
	f.cover()
	if f.End != 200 || f.Gap != 200 {
		t.Fatalf("end %d gap %d, want 200 and 200", f.End, f.Gap)
	}
	for _, bad := range []string{"7/mysql-bin.000001.000000000000-000000000000-" + strings.Repeat("a", 64), "x/mysql-bin.000001.000000000000-000000000010-" + strings.Repeat("a", 64), "7/mysql-bin.000001.0-10-ab"} {
		if _, ok := parseKey(bad); ok {
			t.Errorf("%q was read as a segment", bad)
		}
	}
	if s, ok := parseKey("7/mysql-bin.000001.000000000010-000000000020-" + strings.Repeat("a", 64) + ".zst.age"); !ok || s.Server != 7 || s.Start != 16 || s.End != 32 || s.File != "mysql-bin.000001" {
		t.Fatalf("parse: %+v %v", s, ok)
	}
}
