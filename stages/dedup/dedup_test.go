package dedup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
)

func testKey(t testing.TB) Key {
	t.Helper()
	text, err := NewKeyFile()
	if err != nil {
		t.Fatal(err)
	}
	k, err := ParseKey(text)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// chunks cuts data and returns its chunks' IDs.
// fixedKey is a key made of seed, the same in every run: a test whose
// outcome depends on where the boundaries fall under a key takes one, so
// that it is the same every time (under a random key, about one run in
// 500 of TestChunkerStable changed 5 or 6 chunks: an edit near a chunk
// cut at the largest size shifts the chunks after it until content cuts
// them again).
func fixedKey(t testing.TB, seed byte) Key {
	t.Helper()
	k, err := ParseKey(keyPrefix + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{seed}, 32)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func chunks(t testing.TB, k Key, s Sizes, data []byte) []ID {
	t.Helper()
	c, err := NewChunker(k, s, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h := k.Hasher()
	var ids []ID
	total := 0
	eachChunk(t, c, func(b []byte, done func()) {
		if len(b) > s.Max || (len(b) < s.Min && total+len(b) != len(data)) {
			t.Fatalf("chunk %d of %d bytes at %d, outside %d..%d", len(ids), len(b), total, s.Min, s.Max)
		}
		total += len(b)
		ids = append(ids, h.Sum(b))
		done()
	})
	if total != len(data) {
		t.Fatalf("the chunks hold %d bytes of %d", total, len(data))
	}
	return ids
}

// eachChunk hands f each chunk of c, with its done, until the stream ends.
func eachChunk(t testing.TB, c *Chunker, f func(chunk []byte, done func())) {
	t.Helper()
	for {
		b, done, err := c.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f(b, done)
	}
}

func randomBytes(seed int64, n int) []byte {
	b := make([]byte, n)
	rand.New(rand.NewSource(seed)).Read(b)
	return b
}

// An insertion and a deletion change the chunks around them only; under
// another key the boundaries differ.
func TestChunkerStable(t *testing.T) {
	k := fixedKey(t, 1)
	s := Sizes{Min: 16 << 10, Avg: 64 << 10, Max: 256 << 10}
	data := randomBytes(1, 16<<20)
	before := chunks(t, k, s, data)
	if n := len(before); n < 16<<20/(128<<10) || n > 16<<20/(32<<10) {
		t.Errorf("%d chunks of 16 MiB at an average of 64 KiB", n)
	}
	edited := append(append(append([]byte(nil), data[:5<<20]...), "an insertion"...), data[5<<20:]...)
	edited = append(edited[:11<<20], edited[11<<20+1000:]...)
	after := chunks(t, k, s, edited)
	have := map[ID]bool{}
	for _, id := range before {
		have[id] = true
	}
	var changed int
	for _, id := range after {
		if !have[id] {
			changed++
		}
	}
	if changed == 0 || changed > 4 {
		t.Errorf("an insertion and a deletion changed %d of %d chunks, want 1 to 4", changed, len(after))
	}
	other := chunks(t, fixedKey(t, 2), s, data)
	same := 0
	for _, id := range other {
		if have[id] {
			same++
		}
	}
	if same != 0 {
		t.Errorf("under another key %d chunks have the same ID", same)
	}
	if empty := chunks(t, k, s, nil); len(empty) != 0 {
		t.Errorf("an empty stream has %d chunks", len(empty))
	}
}

func TestKeyFile(t *testing.T) {
	text, err := NewKeyFile()
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := ParseKey(text)
	k2, _ := ParseKey("\n" + text + "\n# again\n")
	if k1.Check() != k2.Check() || k1.Hasher().Sum([]byte("x")) != k2.Hasher().Sum([]byte("x")) {
		t.Error("the same key file parsed twice gives two keys")
	}
	if testKey(t).Check() == k1.Check() {
		t.Error("two keys have one check")
	}
	secret := strings.TrimPrefix(strings.TrimSpace(text[strings.LastIndex(strings.TrimSpace(text), "\n"):]), keyPrefix)
	for _, bad := range []string{"", "# only a comment\n", keyPrefix + secret[:20], secret, text + text, keyPrefix + secret + "x"} {
		_, err := ParseKey(bad)
		if err == nil {
			t.Errorf("ParseKey(%q) accepted it", bad)
			continue
		}
		if strings.Contains(err.Error(), secret[:12]) {
			t.Errorf("ParseKey's error quotes the key: %v", err)
		}
	}
}

// memStore is a store of packs in memory.
type memStore struct {
	mu      sync.Mutex
	objects map[string][]byte
	reads   int
}

func newMemStore() *memStore { return &memStore{objects: map[string][]byte{}} }

type memWriter struct {
	s    *memStore
	name string
	b    bytes.Buffer
}

func (s *memStore) Create(ctx context.Context, name string) (sdk.ObjectWriter, error) {
	return &memWriter{s: s, name: name}, nil
}

func (w *memWriter) Write(p []byte) (int, error) { return w.b.Write(p) }
func (w *memWriter) Commit(ctx context.Context) error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if _, ok := w.s.objects[w.name]; ok {
		return fmt.Errorf("%s exists", w.name)
	}
	w.s.objects[w.name] = bytes.Clone(w.b.Bytes())
	return nil
}
func (w *memWriter) Abort(ctx context.Context) error { return nil }

func (s *memStore) ReadRange(ctx context.Context, pack string, off int64, p []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	b, ok := s.objects[pack]
	if !ok {
		return fmt.Errorf("pack %s: %w", pack, sdk.ErrNotFound)
	}
	if off+int64(len(p)) > int64(len(b)) {
		return io.ErrUnexpectedEOF
	}
	copy(p, b[off:])
	return nil
}

func (s *memStore) size() (n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.objects {
		n += int64(len(b))
	}
	return n
}

func testFormat(t testing.TB) (seal, open Format) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	rs, err := encrypt.ParseRecipients([]string{id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	is, err := encrypt.ParseIdentities([]string{id.String()})
	if err != nil {
		t.Fatal(err)
	}
	z, _ := compress.Lookup("zstd")
	return Format{Codec: z, Level: 3, Keys: rs}, Format{Codec: z, Keys: is}
}

var testSizes = Sizes{Min: 16 << 10, Avg: 64 << 10, Max: 256 << 10}

// backupRun backs up streams into store as one run, with an index of
// memory bytes loaded from the lists given, and returns the run's lists.
func backupRun(t *testing.T, k Key, f Format, store *memStore, run string, streams [][]byte, memory int64, earlier [][]byte) ([][]byte, *Backup) {
	t.Helper()
	ctx := context.Background()
	ix := NewIndex(memory)
	for _, l := range earlier {
		if _, err := ix.Load(bytes.NewReader(l)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := NewBackup(ctx, BackupConfig{Key: k, Sizes: testSizes, Format: f, Index: ix, Packer: NewPacker(store, run, 1<<20), Workers: 2, Ahead: 2})
	if err != nil {
		t.Fatal(err)
	}
	lists := make([][]byte, len(streams))
	var g sync.WaitGroup
	errs := make([]error, len(streams))
	for i, s := range streams {
		g.Add(1)
		go func() {
			defer g.Done()
			var out bytes.Buffer
			errs[i] = b.Stream(ctx, &out, bytes.NewReader(s))
			lists[i] = out.Bytes()
		}()
	}
	g.Wait()
	if err := errors.Join(errs...); err != nil {
		b.Abort(ctx)
		t.Fatal(err)
	}
	if _, err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return lists, b
}

func restoreList(t *testing.T, f Format, store *memStore, list []byte) ([]byte, error) {
	t.Helper()
	r, err := NewRestore(store, f, 3, testSizes.Max)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = r.Stream(context.Background(), &out, bytes.NewReader(list))
	return out.Bytes(), err
}

// Runs round-trip; a second run of slightly changed streams stores only
// what changed; a chunk that occurs twice is stored once.
func TestRoundTrip(t *testing.T) {
	k := testKey(t)
	seal, open := testFormat(t)
	store := newMemStore()
	text := func(seed int64, n int) []byte {
		r := rand.New(rand.NewSource(seed))
		var b bytes.Buffer
		for b.Len() < n {
			fmt.Fprintf(&b, "%d\t%d\t%s\n", r.Intn(1e7), r.Intn(1e4), strings.Repeat("x", r.Intn(80)))
		}
		return b.Bytes()
	}
	a, bb := text(1, 6<<20), randomBytes(2, 4<<20)
	twice := append(append([]byte(nil), bb...), bb...)
	streams := [][]byte{a, twice, {}, []byte("short")}
	lists, b1 := backupRun(t, k, seal, store, "run1", streams, 64<<20, nil)
	for i, l := range lists {
		got, err := restoreList(t, open, store, l)
		if err != nil || !bytes.Equal(got, streams[i]) {
			t.Fatalf("stream %d: %d bytes back of %d, %v", i, len(got), len(streams[i]), err)
		}
	}
	// Each distinct chunk of the run stored once, however often it
	// occurs: the stream that holds the random 4 MiB twice names most of
	// its chunks twice, and they were stored once.
	distinct, inTwice := map[ID]bool{}, map[ID]int{}
	for i, l := range lists {
		r := NewListReader(bytes.NewReader(l))
		for {
			ref, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			distinct[ref.ID] = true
			if i == 1 {
				inTwice[ref.ID]++
			}
		}
	}
	repeated := 0
	for _, n := range inTwice {
		if n > 1 {
			repeated++
		}
	}
	if st := b1.Stats(); st.New.Load() != int64(len(distinct)) || repeated < len(inTwice)/2 {
		t.Errorf("the first run stored %d chunks for %d distinct ones; of the %d distinct chunks of the stream that holds 4 MiB twice, %d occur twice", st.New.Load(), len(distinct), len(inTwice), repeated)
	}
	first := store.size()

	// Night two: a few rows of a changed, one inserted.
	a2 := bytes.Clone(a)
	copy(a2[3<<20:], bytes.ToUpper(a2[3<<20:3<<20+2000]))
	a2 = append(a2[:1<<20], append([]byte("inserted row\n"), a2[1<<20:]...)...)
	streams2 := [][]byte{a2, twice, {}, []byte("short")}
	lists2, b2 := backupRun(t, k, seal, store, "run2", streams2, 64<<20, lists)
	for i, l := range lists2 {
		got, err := restoreList(t, open, store, l)
		if err != nil || !bytes.Equal(got, streams2[i]) {
			t.Fatalf("run 2 stream %d: %d bytes back of %d, %v", i, len(got), len(streams2[i]), err)
		}
	}
	st := b2.Stats()
	t.Logf("run 2: %d new chunks of %d, %d bytes added to %d", st.New.Load(), st.Chunks.Load(), store.size()-first, first)
	if added := store.size() - first; added > first/10 || st.New.Load() > 8 {
		t.Errorf("the second run added %d bytes to %d (%d new chunks of %d)", added, first, st.New.Load(), st.Chunks.Load())
	}
	// Run 1 still restores: nothing of it was touched.
	if got, err := restoreList(t, open, store, lists[0]); err != nil || !bytes.Equal(got, a) {
		t.Errorf("run 1 after run 2: %v", err)
	}

	// An index with room for 3 chunks stores most chunks again, and the
	// run is as good.
	ix := NewIndex(3 * EntryMemory)
	left, err := ix.Load(bytes.NewReader(lists[0]))
	if err != nil || ix.Len() != 3 || left == 0 {
		t.Errorf("an index of 3 entries loaded %d and left %d (%v)", ix.Len(), left, err)
	}
	lists3, b3 := backupRun(t, k, seal, store, "run3", streams2[:1], 3*EntryMemory, lists)
	if got, err := restoreList(t, open, store, lists3[0]); err != nil || !bytes.Equal(got, a2) {
		t.Errorf("a run with a small index: %v", err)
	}
	if b3.Stats().New.Load() < b3.Stats().Chunks.Load()/2 {
		t.Errorf("a run with an index of 3 entries stored %d new chunks of %d", b3.Stats().New.Load(), b3.Stats().Chunks.Load())
	}
}

// A damaged pack fails the restore naming the chunk and the pack; a list
// that names a missing pack names it.
func TestDamage(t *testing.T) {
	k := testKey(t)
	seal, open := testFormat(t)
	store := newMemStore()
	data := randomBytes(3, 2<<20)
	lists, _ := backupRun(t, k, seal, store, "run1", [][]byte{data}, 64<<20, nil)
	l := NewListReader(bytes.NewReader(lists[0]))
	if _, err := l.Next(); err != nil {
		t.Fatal(err)
	}
	second, err := l.Next()
	if err != nil {
		t.Fatal(err)
	}
	store.objects[second.Pack][second.Offset+second.Size/2] ^= 1
	_, err = restoreList(t, open, store, lists[0])
	if err == nil || !strings.Contains(err.Error(), "chunk 2 of the stream") || !strings.Contains(err.Error(), second.Pack) || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("a damaged blob: %v", err)
	}
	delete(store.objects, second.Pack)
	if _, err = restoreList(t, open, store, lists[0]); err == nil || !errors.Is(err, sdk.ErrNotFound) {
		t.Errorf("a missing pack: %v", err)
	}
	// Another identity opens nothing.
	_, other := testFormat(t)
	store2 := newMemStore()
	lists2, _ := backupRun(t, k, seal, store2, "run1", [][]byte{data}, 64<<20, nil)
	if _, err := restoreList(t, other, store2, lists2[0]); err == nil || !strings.Contains(err.Error(), "none of the identities") {
		t.Errorf("another identity: %v", err)
	}
}

func TestListErrors(t *testing.T) {
	var b bytes.Buffer
	w := NewListWriter(&b)
	ref := Ref{Plain: 10, Loc: Loc{Pack: "r-00001.pack", Offset: 5, Size: 300}}
	ref.ID[0], ref.Sum[1] = 1, 2
	if err := w.Add(ref); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Written compressed; read compressed, or as the plain text lists
	// were written before.
	stored := b.Bytes()
	if !bytes.HasPrefix(stored, zstdMagic) {
		t.Fatalf("the list is not zstd: %q", stored[:min(len(stored), 20)])
	}
	dec, err := zstd.NewReader(bytes.NewReader(stored))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := io.ReadAll(dec)
	if err != nil {
		t.Fatal(err)
	}
	good := string(plain)
	line := strings.Split(good, "\n")[1]
	for name, list := range map[string]string{"compressed": string(stored), "plain": good} {
		r := NewListReader(strings.NewReader(list))
		if got, err := r.Next(); err != nil || got != ref {
			t.Fatalf("%s: read back %+v, %v", name, got, err)
		}
		if _, err := r.Next(); !errors.Is(err, io.EOF) {
			t.Fatalf("%s: after the last: %v", name, err)
		}
	}
	// A compressed list cut short or damaged is an error, not a shorter
	// list (zstd's frame checksum).
	flipped := bytes.Clone(stored)
	flipped[len(flipped)/2] ^= 0x40
	for _, list := range []string{string(stored[:len(stored)-5]), string(flipped)} {
		r := NewListReader(strings.NewReader(list))
		var err error
		for err == nil {
			_, err = r.Next()
		}
		if errors.Is(err, io.EOF) {
			t.Errorf("a damaged compressed list read to its end")
		}
	}
	for _, c := range []struct{ list, want string }{
		{"", "empty"},
		{"pipe-chunks/v2\n", "not a chunk list"},
		{ListHeader + "\n" + line + "\n", "cut short"},
		{ListHeader + "\n" + line + "\nend 2 10\n", "damaged"},
		{ListHeader + "\n" + strings.Replace(line, "r-00001.pack", "../x.pack", 1) + "\n", "not a pack name"},
		{ListHeader + "\n" + strings.Replace(line, " 10 ", " 0 ", 1) + "\n", "chunk size"},
		{ListHeader + "\n" + strings.Replace(line, " 5 ", " -5 ", 1) + "\n", "offset"},
		{ListHeader + "\n" + line[2:] + "\n", "chunk id"},
		{ListHeader + "\n" + line + " extra\n", "fields"},
		{ListHeader + "\n" + "aa" + line + "\n", "chunk id"},
		{ListHeader + "\n" + line + "aa\n", "sha256"},
		{ListHeader + "\n" + line + "\nend 1 10 x\n", "damaged"},
		{good + "more\n", "after the end"},
	} {
		r := NewListReader(strings.NewReader(c.list))
		var err error
		for err == nil {
			_, err = r.Next()
		}
		if errors.Is(err, io.EOF) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("list %q: %v, want %q", c.list, err, c.want)
		}
	}
}

func TestFormatCheck(t *testing.T) {
	gz, _ := compress.Lookup("gzip")
	if err := (Format{Codec: gz}).Check(); err == nil {
		t.Error("gzip chunks accepted")
	}
	pp, err := encrypt.Passphrase("correct horse battery staple")
	if err != nil {
		t.Fatal(err)
	}
	if err := (Format{Keys: pp}).Check(); err == nil {
		t.Error("passphrase chunks accepted")
	}
	// Neither compressed nor encrypted: blobs are the chunks.
	store := newMemStore()
	data := randomBytes(4, 1<<20)
	lists, _ := backupRun(t, testKey(t), Format{}, store, "plain", [][]byte{data}, 1<<20, nil)
	if got, err := restoreList(t, Format{}, store, lists[0]); err != nil || !bytes.Equal(got, data) {
		t.Errorf("plain chunks: %v", err)
	}
	if store.size() != int64(len(data)) {
		t.Errorf("plain chunks take %d bytes for %d", store.size(), len(data))
	}
}

// roll finds the boundary a byte-at-a-time gear hash finds.
func TestRoll(t *testing.T) {
	k := testKey(t)
	c := newCutter(k, Sizes{Min: 1 << 10, Avg: 4 << 10, Max: 16 << 10})
	data := randomBytes(5, 1<<20)
	for _, from := range []int{0, 1, 2, 3, 1000} {
		for _, mask := range []uint64{c.maskS, c.maskL, spacedMask(3)} {
			var fp uint64
			want, ok := -1, false
			for i := from; i < len(data) && !ok; i++ {
				if fp = fp<<1 + c.gear[data[i]]; fp&mask == 0 {
					want, ok = i, true
				}
			}
			got, gfp, gok := roll(data, from, 0, &c.gear, mask)
			if gok != ok || (ok && (got != want || gfp != fp)) {
				t.Errorf("from %d, mask %x: roll says %d (%v), one byte at a time %d (%v)", from, mask, got, gok, want, ok)
			}
		}
	}
}

// A copy moves the chunks the target lacks, sealed as they are, and its
// lists restore from the target alone; a second run's copy moves only
// what changed; a damaged blob fails the copy naming it.
func TestCopy(t *testing.T) {
	k := testKey(t)
	seal, open := testFormat(t)
	from, to := newMemStore(), newMemStore()
	a := randomBytes(6, 3<<20)
	l1, _ := backupRun(t, k, seal, from, "run1", [][]byte{a}, 64<<20, nil)
	a2 := bytes.Clone(a)
	copy(a2[1<<20:], "changed")
	l2, _ := backupRun(t, k, seal, from, "run2", [][]byte{a2}, 64<<20, l1)
	ctx := context.Background()
	ix := NewIndex(64 << 20)
	copyList := func(list []byte, run string) ([]byte, *Copier) {
		t.Helper()
		c := NewCopier(ctx, from, ix, NewPacker(to, run, 1<<20))
		var out bytes.Buffer
		if err := c.Stream(ctx, &out, bytes.NewReader(list)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
		return out.Bytes(), c
	}
	c1, st1 := copyList(l1[0], "copy1")
	c2, st2 := copyList(l2[0], "copy2")
	for _, c := range []struct {
		list []byte
		want []byte
	}{{c1, a}, {c2, a2}} {
		if got, err := restoreList(t, open, to, c.list); err != nil || !bytes.Equal(got, c.want) {
			t.Errorf("a copied run restored from the target: %d bytes of %d, %v", len(got), len(c.want), err)
		}
	}
	if n, all := st2.Stats().New.Load(), st2.Stats().Chunks.Load(); n == 0 || n > 3 || st1.Stats().New.Load() != st1.Stats().Chunks.Load() {
		t.Errorf("the first copy moved %d chunks of %d, the second %d of %d", st1.Stats().New.Load(), st1.Stats().Chunks.Load(), n, all)
	}
	// A damaged blob in the source.
	r := NewListReader(bytes.NewReader(l1[0]))
	ref, _ := r.Next()
	from.objects[ref.Pack][ref.Offset] ^= 1
	c := NewCopier(ctx, from, NewIndex(64<<20), NewPacker(newMemStore(), "copy3", 1<<20))
	if err := c.Stream(ctx, io.Discard, bytes.NewReader(l1[0])); err == nil || !strings.Contains(err.Error(), "chunk 1 of the stream") || !strings.Contains(err.Error(), "damaged") {
		t.Errorf("copying a damaged chunk: %v", err)
	}
}

// The chunker, reading ahead into its slabs, cuts where cutter.cut does
// and hands out the stream's own bytes, whatever the reads' sizes and the
// chunk sizes.
func TestChunkerMatchesCut(t *testing.T) {
	text := func(n int) []byte {
		r := rand.New(rand.NewSource(9))
		var b bytes.Buffer
		for b.Len() < n {
			fmt.Fprintf(&b, "%d\t%d\t0\t%s\n", r.Intn(1e7), r.Intn(100), strings.Repeat(" ", r.Intn(90)))
		}
		return b.Bytes()[:n]
	}
	for _, c := range []struct {
		s    Sizes
		data []byte
		read int
	}{
		{DefaultSizes, randomBytes(7, 40<<20+13), 1 << 20},
		{DefaultSizes, text(30 << 20), 64 << 10},
		{Sizes{Min: 2 << 10, Avg: 8 << 10, Max: 32 << 10}, randomBytes(8, 5<<20), 7000},
		{Sizes{Min: 16 << 10, Avg: 64 << 10, Max: 256 << 10}, text(3 << 20), 1},
		{DefaultSizes, randomBytes(9, 100), 1 << 20},
	} {
		k := testKey(t)
		cut := newCutter(k, c.s)
		var want []int
		for d := c.data; len(d) > 0; {
			n := cut.cut(d)
			want = append(want, n)
			d = d[n:]
		}
		ch, err := NewChunker(k, c.s, iotest.OneByteReader(bytes.NewReader(c.data)))
		if c.read > 1 {
			ch, err = NewChunker(k, c.s, &sizedReader{r: bytes.NewReader(c.data), n: c.read})
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		off := 0
		eachChunk(t, ch, func(b []byte, done func()) {
			if !bytes.Equal(b, c.data[off:off+len(b)]) {
				t.Fatalf("sizes %v: chunk %d (%d bytes at %d) differs from the stream's bytes there", c.s, len(got), len(b), off)
			}
			off += len(b)
			got = append(got, len(b))
			done()
		})
		ch.Close()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("sizes %v, %d bytes read %d at a time: %d chunks, cut gives %d; first difference at %d", c.s, len(c.data), c.read, len(got), len(want), firstDiff(got, want))
		}
	}
}

// A chunk stays as it was cut until its done is called, however long its
// reader holds it and however far the chunker has cut meanwhile.
func TestChunkerKeepsChunksUntilDone(t *testing.T) {
	k := testKey(t)
	s := Sizes{Min: 2 << 10, Avg: 8 << 10, Max: 32 << 10}
	data := randomBytes(11, 3<<20)
	c, err := NewChunker(k, s, &sizedReader{r: bytes.NewReader(data), n: 5000})
	if err != nil {
		t.Fatal(err)
	}
	// A reader that holds chunks in batches, of up to 40 or until none
	// came for a while, and checks and releases each batch newest first.
	held := make(chan func(), 40)
	released := make(chan struct{})
	go func() {
		defer close(released)
		var batch []func()
		flush := func() {
			for i := len(batch) - 1; i >= 0; i-- {
				batch[i]()
			}
			batch = batch[:0]
		}
		for {
			select {
			case f, ok := <-held:
				if !ok {
					flush()
					return
				}
				if batch = append(batch, f); len(batch) == 40 {
					flush()
				}
			case <-time.After(5 * time.Millisecond):
				flush()
			}
		}
	}()
	off := 0
	eachChunk(t, c, func(b []byte, done func()) {
		at := off
		off += len(b)
		held <- func() {
			if !bytes.Equal(b, data[at:at+len(b)]) {
				t.Errorf("the chunk at %d was written over before its done", at)
			}
			done()
		}
	})
	close(held)
	<-released
	c.Close()
	if off != len(data) {
		t.Fatalf("the chunks hold %d bytes of %d", off, len(data))
	}
}

// A read that fails fails the chunker's Next, every time; Close before the
// stream's end stops the filler, which reads nothing after it.
func TestChunkerReadFailsAndClose(t *testing.T) {
	k := testKey(t)
	s := Sizes{Min: 2 << 10, Avg: 8 << 10, Max: 32 << 10}
	boom := errors.New("disk gone")
	c, err := NewChunker(k, s, io.MultiReader(bytes.NewReader(randomBytes(12, 1<<20)), iotest.ErrReader(boom)))
	if err != nil {
		t.Fatal(err)
	}
	var failed error
	for failed == nil {
		_, done, err := c.Next()
		if err != nil {
			failed = err
			break
		}
		done()
	}
	if !errors.Is(failed, boom) {
		t.Fatalf("Next = %v, want the read's error", failed)
	}
	if _, _, err := c.Next(); !errors.Is(err, boom) {
		t.Fatalf("Next after the failure = %v, want the read's error again", err)
	}
	c.Close()

	r := &countingReader{r: bytes.NewReader(randomBytes(13, 64<<20))}
	c, err = NewChunker(k, s, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, done, err := c.Next(); err != nil {
		t.Fatal(err)
	} else {
		done()
	}
	c.Close()
	n := r.reads.Load()
	time.Sleep(20 * time.Millisecond)
	if r.reads.Load() != n {
		t.Fatalf("the chunker read its stream after Close")
	}
	if max := ChunkerMemory(s); r.bytes.Load() > max {
		t.Fatalf("the chunker read %d bytes ahead, more than its %d", r.bytes.Load(), max)
	}
}

type countingReader struct {
	r            io.Reader
	reads, bytes atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.reads.Add(1)
	c.bytes.Add(int64(n))
	return n, err
}

type sizedReader struct {
	r io.Reader
	n int
}

func (s *sizedReader) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), s.n)]) }

func firstDiff(a, b []int) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// A list that names a chunk larger than the run's chunks can be is refused
// before anything is read or allocated for it.
func TestRestoreRefusesGiantChunks(t *testing.T) {
	var b bytes.Buffer
	w := NewListWriter(&b)
	w.Add(Ref{Plain: 200 << 20, Loc: Loc{Pack: "r-00001.pack", Size: 100}})
	w.Close()
	_, open := testFormat(t)
	if _, err := restoreList(t, open, newMemStore(), b.Bytes()); err == nil || !strings.Contains(err.Error(), "more than the run's chunks can be") {
		t.Errorf("a chunk of 200 MiB in a run of chunks up to %d: %v", testSizes.Max, err)
	}
}

// A list whose bytes are not those its manifest records adds nothing to
// the index.
func TestLoadChecked(t *testing.T) {
	var b bytes.Buffer
	w := NewListWriter(&b)
	ref := Ref{Plain: 10, Loc: Loc{Pack: "r-00001.pack", Size: 100}}
	ref.ID[0] = 7
	w.Add(ref)
	w.Close()
	sum := sha256.Sum256(b.Bytes())
	digest := "sha256:" + hex.EncodeToString(sum[:])
	ix := NewIndex(1 << 20)
	if _, err := ix.LoadChecked(bytes.NewReader(b.Bytes()), digest); err != nil || ix.Len() != 1 {
		t.Fatalf("a list with its digest: %d chunks, %v", ix.Len(), err)
	}
	var f bytes.Buffer
	w = NewListWriter(&f)
	ref.Pack = "x-00001.pack"
	w.Add(ref)
	w.Close()
	forged := f.Bytes()
	ix = NewIndex(1 << 20)
	if _, err := ix.LoadChecked(bytes.NewReader(forged), digest); err == nil || ix.Len() != 0 {
		t.Errorf("a changed list: %d chunks taken, %v", ix.Len(), err)
	}
}
