package postgres

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// chainModel is a cluster whose relation files change between the base
// backups of a chain, as PostgreSQL 17's incremental backups see it:
// each incremental holds, of a relation file the previous backup had,
// the blocks written since and the file's length; of a new one, all of
// it; of a dropped one, nothing.
type chainModel struct {
	rng   *rand.Rand
	files map[string][]byte // relation files, by path
	// written are the blocks written since the last backup, by path.
	written map[string]map[uint32]bool
	// backedUp are the files of the last backup.
	backedUp map[string]bool
	gen      int
}

func newChainModel(seed uint64) *chainModel {
	m := &chainModel{rng: rand.New(rand.NewPCG(seed, 7)), files: map[string][]byte{}, written: map[string]map[uint32]bool{}}
	for i := range 6 {
		m.create(fmt.Sprintf("base/5/%d", 16384+i), 1+m.rng.IntN(40))
	}
	m.create("base/5/16400_fsm", 3)
	m.create("base/5/16401", 0) // empty
	return m
}

func (m *chainModel) block() []byte {
	b := make([]byte, blockSize)
	for i := 0; i < blockSize; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], m.rng.Uint64())
	}
	return b
}

func (m *chainModel) create(name string, blocks int) {
	var b []byte
	for range blocks {
		b = append(b, m.block()...)
	}
	m.files[name] = b
	m.written[name] = map[uint32]bool{}
	for i := range blocks {
		m.written[name][uint32(i)] = true
	}
}

// change writes, truncates, extends, creates and drops files.
func (m *chainModel) change() {
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range m.files {
			if !yield(n) {
				return
			}
		}
	})
	for _, name := range names {
		f := m.files[name]
		n := len(f) / blockSize
		switch m.rng.IntN(6) {
		case 0: // untouched
		case 1: // truncated (VACUUM), perhaps to nothing
			if n > 0 {
				m.files[name] = f[:m.rng.IntN(n)*blockSize]
			}
		case 2: // extended
			for range 1 + m.rng.IntN(5) {
				m.written[name][uint32(len(m.files[name])/blockSize)] = true
				m.files[name] = append(m.files[name], m.block()...)
			}
		default: // a few blocks rewritten
			for range min(n, 1+m.rng.IntN(4)) {
				b := m.rng.IntN(n)
				copy(f[b*blockSize:], m.block())
				m.written[name][uint32(b)] = true
			}
		}
	}
	m.gen++
	m.create(fmt.Sprintf("base/5/%d", 17000+m.gen), 1+m.rng.IntN(5))
	if len(names) > 3 && m.rng.IntN(2) == 0 {
		delete(m.files, names[m.rng.IntN(len(names))])
	}
}

// backup is one base backup of the model: base.tar and its manifest.
func (m *chainModel) backup(t *testing.T, incremental bool) (base, manifest []byte) {
	t.Helper()
	type entry struct {
		name string
		body []byte
	}
	label := "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)\nLABEL: pipe\n"
	if incremental {
		label += "INCREMENTAL FROM LSN: 0/1000028\nINCREMENTAL FROM TLI: 1\n"
	}
	entries := []entry{{"PG_VERSION", []byte("17\n")}, {"global/pg_control", []byte("control")}, {"backup_label", []byte(label)}}
	for _, name := range slices.Sorted(mapsKeys(m.files)) {
		f := m.files[name]
		if !incremental || !m.backedUp[name] {
			entries = append(entries, entry{name, bytes.Clone(f)})
			continue
		}
		var blocks []uint32
		for b := range m.written[name] {
			if int(b) < len(f)/blockSize {
				blocks = append(blocks, b)
			}
		}
		slices.Sort(blocks)
		var body bytes.Buffer
		binary.Write(&body, binary.LittleEndian, []uint32{incrementalMagic, uint32(len(blocks)), uint32(len(f) / blockSize)})
		binary.Write(&body, binary.LittleEndian, blocks)
		if len(blocks) > 0 && body.Len()%blockSize != 0 {
			body.Write(make([]byte, blockSize-body.Len()%blockSize))
		}
		for _, b := range blocks {
			body.Write(f[int(b)*blockSize : int(b+1)*blockSize])
		}
		dir, file := filepath.Split(name)
		entries = append(entries, entry{dir + incrementalPrefix + file, body.Bytes()})
	}
	var tb, mb bytes.Buffer
	tw := tar.NewWriter(&tb)
	mb.WriteString("{ \"PostgreSQL-Backup-Manifest-Version\": 2,\n\"System-Identifier\": 7,\n\"Files\": [")
	for i, e := range entries {
		if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o600, Size: int64(len(e.body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		tw.Write(e.body)
		if i > 0 {
			mb.WriteByte(',')
		}
		sum := binary.LittleEndian.AppendUint32(nil, crc32.Checksum(e.body, crc32.MakeTable(crc32.Castagnoli)))
		fmt.Fprintf(&mb, "\n{ \"Path\": %q, \"Size\": %d, \"Last-Modified\": \"2026-11-29 10:00:00 GMT\", \"Checksum-Algorithm\": \"CRC32C\", \"Checksum\": \"%x\" }", e.name, len(e.body), sum)
	}
	tw.Close()
	mb.WriteString("\n],\n\"WAL-Ranges\": [\n{ \"Timeline\": 1, \"Start-LSN\": \"0/2000028\", \"End-LSN\": \"0/2000100\" }\n],\n")
	sum := sha256.Sum256(mb.Bytes())
	fmt.Fprintf(&mb, "\"Manifest-Checksum\": \"%x\"}\n", sum)
	m.backedUp = map[string]bool{}
	for name := range m.files {
		m.backedUp[name] = true
		m.written[name] = map[uint32]bool{}
	}
	return tb.Bytes(), mb.Bytes()
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// composeChain restores runs (oldest first, as taken) newest first into
// a new data directory, and returns it.
func composeChain(t *testing.T, runs [][2][]byte) (string, error) {
	t.Helper()
	ctx := context.Background()
	dd := filepath.Join(t.TempDir(), "data")
	s := baseSink(t, map[string]any{"data_directory": dd, "restore_command": "pipe wal fetch /etc/pipe/pg.hcl %f %p"})
	objs := []sdk.Object{{Key: "base.tar", Stream: "base.tar"}, {Key: "backup_manifest", Stream: "backup_manifest"}}
	for i := range runs {
		run := runs[len(runs)-1-i]
		if err := s.Compose(ctx, i, len(runs), fmt.Sprintf("run%d", len(runs)-1-i)); err != nil {
			return dd, err
		}
		if err := s.Prepare(ctx, objs); err != nil {
			return dd, err
		}
		if err := put(t, s, "base.tar", run[0]); err != nil {
			return dd, err
		}
		if err := put(t, s, "backup_manifest", run[1]); err != nil {
			return dd, err
		}
		if err := s.Flush(ctx); err != nil {
			return dd, err
		}
	}
	return dd, nil
}

// TestComposeChainRebuildsEveryFile composes chains of a full and up to
// six incrementals of a model cluster whose files are rewritten,
// truncated, extended, created and dropped between backups: each file
// restored is the cluster's at the newest backup, none of the dropped
// ones is there, backup_label lost its incremental lines, and the
// manifest names the rebuilt files with their sizes and checksums.
func TestComposeChainRebuildsEveryFile(t *testing.T) {
	for seed := range uint64(8) {
		m := newChainModel(seed)
		var runs [][2][]byte
		for i := range 7 {
			if i > 0 {
				m.change()
			}
			base, man := m.backup(t, i > 0)
			runs = append(runs, [2][]byte{base, man})
			want := map[string][]byte{}
			for name, f := range m.files {
				want[name] = bytes.Clone(f)
			}
			dd, err := composeChain(t, runs)
			if err != nil {
				t.Fatalf("seed %d, chain of %d: %v", seed, i+1, err)
			}
			checkComposed(t, dd, want, fmt.Sprintf("seed %d, chain of %d", seed, i+1))
		}
	}
}

func checkComposed(t *testing.T, dd string, want map[string][]byte, what string) {
	t.Helper()
	got := map[string]bool{}
	filepath.WalkDir(filepath.Join(dd, "base"), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			rel, _ := filepath.Rel(dd, p)
			got[filepath.ToSlash(rel)] = true
		}
		return err
	})
	for name, body := range want {
		b, err := os.ReadFile(filepath.Join(dd, name))
		if err != nil {
			t.Errorf("%s: %v", what, err)
			continue
		}
		if !bytes.Equal(b, body) {
			t.Errorf("%s: %s differs (%d bytes, want %d)", what, name, len(b), len(body))
		}
		delete(got, name)
	}
	for name := range got {
		t.Errorf("%s: %s is restored, but the cluster dropped it", what, name)
	}
	label, err := os.ReadFile(filepath.Join(dd, "backup_label"))
	if err != nil || strings.Contains(string(label), "INCREMENTAL") || !strings.Contains(string(label), "LABEL: pipe") {
		t.Errorf("%s: backup_label reads %q (%v)", what, label, err)
	}
	if _, err := os.Stat(filepath.Join(dd, pgControl)); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	checkManifest(t, dd, what)
}

// checkManifest checks the restored backup_manifest as pg_verifybackup
// would: its checksum, and every file's size and checksum.
func checkManifest(t *testing.T, dd, what string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dd, streamManifest))
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("\"Manifest-Checksum\""))
	sum := sha256.Sum256(b[:i])
	if !bytes.Contains(b[i:], []byte(hex.EncodeToString(sum[:]))) {
		t.Errorf("%s: the manifest's checksum does not cover it", what)
	}
	for line := range strings.Lines(string(b[:i])) {
		if !strings.HasPrefix(line, `{ "Path"`) {
			continue
		}
		e, _, err := fileLine(line)
		if err != nil {
			t.Fatalf("%s: %q: %v", what, line, err)
		}
		if strings.Contains(*e.Path, incrementalPrefix) {
			t.Errorf("%s: the manifest still names %s", what, *e.Path)
			continue
		}
		sum, size, err := fileChecksum(filepath.Join(dd, *e.Path), e.Algorithm)
		if err != nil || sum != e.Checksum || size != *e.Size {
			t.Errorf("%s: %s: the manifest says %d bytes, %s; the file holds %d, %s (%v)", what, *e.Path, *e.Size, e.Checksum, size, sum, err)
		}
	}
}

// TestComposeChainRefusesABrokenChain: a run of the chain that lacks a
// file the newer runs rebuild fails the restore, naming it.
func TestComposeChainRefusesABrokenChain(t *testing.T) {
	m := newChainModel(1)
	full, fullMan := m.backup(t, false)
	m.change()
	incr, incrMan := m.backup(t, true)
	// The full without any relation file: each rebuilt file lacks its
	// older blocks.
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	tw.WriteHeader(&tar.Header{Name: "global/pg_control", Mode: 0o600, Size: 7, Typeflag: tar.TypeReg})
	tw.Write([]byte("control"))
	tw.Close()
	_, err := composeChain(t, [][2][]byte{{b.Bytes(), fullMan}, {incr, incrMan}})
	if err == nil || !strings.Contains(err.Error(), "run0") || !strings.Contains(err.Error(), "chain is broken") {
		t.Errorf("a chain whose full lacks the files: %v", err)
	}
	_ = full
}

// TestIncrementalHeaderSize: an incremental file whose size is not what
// its header's blocks of 8 KiB take (a server of another block size, a
// damaged file) is refused.
func TestIncrementalHeaderSize(t *testing.T) {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, []uint32{incrementalMagic, 1, 4, 2})
	b.Write(make([]byte, blockSize-b.Len()))
	b.Write(make([]byte, blockSize))
	if h, err := readIncrementalHeader(bytes.NewReader(b.Bytes()), int64(b.Len())); err != nil || h.length() != 4 || len(h.blocks) != 1 {
		t.Fatalf("a well-formed file: %+v, %v", h, err)
	}
	if _, err := readIncrementalHeader(bytes.NewReader(b.Bytes()), 2*16384); err == nil || !strings.Contains(err.Error(), "another block size") {
		t.Errorf("a file of 16 KiB blocks: %v", err)
	}
}

// TestIncrementalRunAloneIsRefused: a postgres_basebackup sink that is
// not composing a chain does not finish a data directory whose
// backup_label says it is incremental.
func TestIncrementalRunAloneIsRefused(t *testing.T) {
	m := newChainModel(2)
	m.backup(t, false)
	m.change()
	incr, man := m.backup(t, true)
	ctx := context.Background()
	dd := filepath.Join(t.TempDir(), "data")
	s := baseSink(t, map[string]any{"data_directory": dd, "restore_command": "pipe wal fetch /etc/pipe/pg.hcl %f %p"})
	if err := s.Prepare(ctx, []sdk.Object{{Key: "base.tar", Stream: "base.tar"}, {Key: "backup_manifest", Stream: "backup_manifest"}}); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(put(t, s, "base.tar", incr), put(t, s, "backup_manifest", man)); err != nil {
		t.Fatal(err)
	}
	if err := s.Flush(ctx); err == nil || !strings.Contains(err.Error(), "incremental backup restored without the runs it builds on") {
		t.Errorf("Flush of an incremental run alone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dd, pgControl)); err == nil {
		t.Error("pg_control is in place")
	}
}
