package postgres

import (
	"archive/tar"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/pipebackup/pipe/plugins/internal/untar"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// The incremental file of PostgreSQL 17's incremental base backups
// (src/include/backup/basebackup_incremental.h): INCREMENTAL.<name> holds
// a header of a magic number, the count of blocks it holds, the file's
// length in blocks (truncation_block_length) and the blocks' numbers,
// padded to a multiple of BLCKSZ when it holds any; then the blocks, in
// that order.
const (
	incrementalMagic  = 0xd3ae1f0d
	incrementalPrefix = "INCREMENTAL."
	blockSize         = 8192
	// relsegBlocks is RELSEG_SIZE: the blocks of a 1 GiB segment, the
	// most a file of a relation holds.
	relsegBlocks = 131072
)

// incrementalHeader is an incremental file's header.
type incrementalHeader struct {
	truncation uint32   // truncation_block_length
	blocks     []uint32 // the numbers of the blocks it holds, in order
}

// length is the length in blocks of the file it rebuilds: at least the
// truncation length, and past every block it holds
// (find_reconstructed_block_length).
func (h incrementalHeader) length() uint32 {
	n := h.truncation
	for _, b := range h.blocks {
		n = max(n, b+1)
	}
	return n
}

// size is the bytes of the incremental file the header heads.
func (h incrementalHeader) size() int64 {
	n := 12 + 4*int64(len(h.blocks))
	if len(h.blocks) > 0 && n%blockSize != 0 {
		n += blockSize - n%blockSize
	}
	return n + int64(len(h.blocks))*blockSize
}

// readIncrementalHeader reads the header of an incremental file of size
// bytes, and its padding, from r: the file must hold its blocks, of
// blockSize each, and nothing else (a server of another block size does
// not match).
func readIncrementalHeader(r io.Reader, size int64) (incrementalHeader, error) {
	h, err := readIncrementalHead(r)
	if err == nil && h.size() != size {
		err = fmt.Errorf("it holds %d bytes, not the %d its %d blocks of %d bytes take: a server of another block size, or a damaged file", size, h.size(), len(h.blocks), blockSize)
	}
	return h, err
}

// readIncrementalHead reads the header itself.
func readIncrementalHead(r io.Reader) (incrementalHeader, error) {
	var fixed [12]byte
	if _, err := io.ReadFull(r, fixed[:]); err != nil {
		return incrementalHeader{}, fmt.Errorf("reading its header: %w", err)
	}
	le := binary.LittleEndian
	if m := le.Uint32(fixed[0:]); m != incrementalMagic {
		return incrementalHeader{}, fmt.Errorf("bad magic number 0x%x (want 0x%x): not an incremental file of PostgreSQL 17 or later", m, incrementalMagic)
	}
	n, trunc := le.Uint32(fixed[4:]), le.Uint32(fixed[8:])
	if n > relsegBlocks || trunc > relsegBlocks {
		return incrementalHeader{}, fmt.Errorf("it claims %d blocks and a length of %d blocks, beyond a segment's %d", n, trunc, relsegBlocks)
	}
	h := incrementalHeader{truncation: trunc, blocks: make([]uint32, n)}
	raw := make([]byte, 4*n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return incrementalHeader{}, fmt.Errorf("reading its block numbers: %w", err)
	}
	for i := range h.blocks {
		if h.blocks[i] = le.Uint32(raw[4*i:]); h.blocks[i] >= relsegBlocks {
			return incrementalHeader{}, fmt.Errorf("it holds block %d, beyond a segment's %d", h.blocks[i], relsegBlocks)
		}
	}
	if size := 12 + 4*int64(n); n > 0 && size%blockSize != 0 {
		if _, err := io.CopyN(io.Discard, r, blockSize-size%blockSize); err != nil {
			return incrementalHeader{}, fmt.Errorf("reading its header's padding: %w", err)
		}
	}
	return h, nil
}

// rebuilt is a file a chain's restore rebuilds from an incremental file of
// its newest run and the runs before: which of its blocks are in place.
type rebuilt struct {
	name   string   // its path in the backup's manifest
	length uint32   // in blocks
	limit  uint32   // the newest run's truncation length: older runs give only blocks below it
	have   []uint64 // a bit per block in place
	left   uint32   // blocks below limit not yet in place
	seen   bool     // met in the run being restored
	file   *os.File // open since start, for the older runs (see keep)
}

func (f *rebuilt) has(b uint32) bool { return f.have != nil && f.have[b/64]&(1<<(b%64)) != 0 }

// set marks block b in place. The bits are made at the first: a file no
// run changed since the full (most of a cluster, in a chain of nightly
// incrementals) costs no more than its entry.
func (f *rebuilt) set(b uint32) {
	if f.has(b) {
		return
	}
	if f.have == nil {
		f.have = make([]uint64, (f.length+63)/64)
	}
	f.have[b/64] |= 1 << (b % 64)
	if b < f.limit {
		f.left--
	}
}

// wants reports whether block b of an older run goes into the file.
func (f *rebuilt) wants(b uint32) bool { return b < f.limit && !f.has(b) }

// composer is a base backup sink's state while it restores a chain of
// runs, newest first (see sdk.Composer): the files rebuilt from the
// newest run's incremental files that still lack blocks, by path on disk,
// and every file rebuilt, by its path in the backup's manifest.
type composer struct {
	index, length int
	runID         string

	// algorithm is the checksum the newest run's manifest takes (Compose
	// reads it once that run is in place).
	algorithm string

	mu      sync.Mutex
	pending map[string]*rebuilt
	rebuilt map[string]string   // manifest path → path on disk
	sums    map[string]fileSum  // manifest path → checksum, taken on the way
	roots   map[string]*os.Root // folder on disk → its root (see open)
	kept    int                 // rebuilt files open (see keep)
	keepMax int
}

// newest reports whether the run being restored is the chain's newest:
// its files are the result's, where older runs only fill in blocks.
func (c *composer) newest() bool { return c.index == 0 }

// last reports whether the run being restored is the chain's full, the
// last restored.
func (c *composer) last() bool { return c.index == c.length-1 }

// hook is the extraction of one archive of the chain's run: dir is where
// it goes, and prefix what the backup's manifest puts before its paths
// ("" for base.tar, pg_tblspc/<oid>/ for a tablespace's).
func (c *composer) hook(dir, prefix string) func(root *os.Root, name string, h *tar.Header, r io.Reader) (bool, error) {
	return func(root *os.Root, name string, h *tar.Header, r io.Reader) (bool, error) {
		base := filepath.Base(name)
		incremental := h.Typeflag == tar.TypeReg && strings.HasPrefix(base, incrementalPrefix)
		target := name
		if incremental {
			target = filepath.Join(filepath.Dir(name), strings.TrimPrefix(base, incrementalPrefix))
		}
		abs := filepath.Join(dir, target)
		if c.newest() {
			if !incremental {
				return false, nil // the result's own file
			}
			return true, c.start(root, abs, target, prefix, h, r)
		}
		c.mu.Lock()
		f := c.pending[abs]
		c.mu.Unlock()
		if f == nil || h.Typeflag != tar.TypeReg {
			return true, nil // not needed: the newest run has its own, or none
		}
		f.seen = true
		if incremental {
			return true, c.fill(root, abs, target, f, h.Size, r)
		}
		return true, c.fillFull(root, abs, target, f, h.Size, r)
	}
}

// start writes the newest run's incremental file as the file it stands
// for: its blocks in place, the rest to come from older runs.
func (c *composer) start(root *os.Root, abs, name, prefix string, h *tar.Header, r io.Reader) error {
	hd, err := readIncrementalHeader(r, h.Size)
	if err != nil {
		return err
	}
	if err := mkdirParent(root, name); err != nil {
		return err
	}
	out, err := c.open(root, abs, name, os.O_RDWR|os.O_CREATE|os.O_EXCL, os.FileMode(h.Mode).Perm()|0o600)
	if err != nil {
		return err
	}
	n := hd.length()
	f := &rebuilt{name: path.Join(prefix, filepath.ToSlash(name)), length: n, limit: hd.truncation, left: hd.truncation}
	err = out.Truncate(int64(n) * blockSize)
	if err == nil {
		err = writeBlocks(out, r, hd.blocks, func(b uint32) bool { return true }, f, nil)
	}
	if err == nil && f.left == 0 {
		err = f.zeroFill(out)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && f.left > 0 && c.kept < c.keep() {
		// The older runs write it too: it stays open for them.
		f.file = out
		c.kept++
	} else if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	c.rebuilt[f.name] = abs
	if f.left > 0 {
		c.pending[abs] = f
	}
	return nil
}

// keep is how many files rebuilt stay open between runs: opening one
// again costs a system call per file (and on a container's overlay file
// system, more), but file descriptors are not unlimited. A quarter of the
// process's limit, at most 4096.
func (c *composer) keep() int {
	if c.keepMax == 0 {
		c.keepMax = 256
		var lim syscall.Rlimit
		if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
			c.keepMax = int(min(4096, lim.Cur/4))
		}
	}
	return c.keepMax
}

// reopen is the file f (name, abs on disk) as start left it open, or
// opened again; keep says it stays open.
func (c *composer) reopen(root *os.Root, abs, name string, f *rebuilt) (out *os.File, keep bool, err error) {
	c.mu.Lock()
	kept := f.file
	c.mu.Unlock()
	if kept != nil {
		return kept, true, nil
	}
	out, err = c.open(root, abs, name, os.O_RDWR, 0)
	return out, false, err
}

// release closes a file reopen opened, or the file f kept when it is
// done; what failed first stays the error.
func (c *composer) release(out *os.File, keep bool, f *rebuilt, err error) error {
	if keep && f.left > 0 && err == nil {
		return nil
	}
	if keep {
		c.mu.Lock()
		f.file = nil
		c.kept--
		c.mu.Unlock()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// fill takes from an older run's incremental file the blocks the file
// still lacks.
func (c *composer) fill(root *os.Root, abs, name string, f *rebuilt, size int64, r io.Reader) error {
	hd, err := readIncrementalHeader(r, size)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(hd.blocks, f.wants) {
		return nil // nothing the file lacks: its data goes unread
	}
	out, keep, err := c.reopen(root, abs, name, f)
	if err != nil {
		return err
	}
	err = writeBlocks(out, r, hd.blocks, f.wants, f, nil)
	if err == nil && f.left == 0 {
		err = f.zeroFill(out)
	}
	err = c.release(out, keep, f, err)
	if err == nil && f.left == 0 {
		c.done(abs)
	}
	return err
}

// fillFull takes from an older run's full copy of the file the blocks it
// still lacks: the chain ends there for this file, and the blocks no run
// holds are zeros (as pg_combinebackup writes them). The blocks pass here
// in order, so the file's checksum for the manifest is taken on the way:
// of the stream's blocks as they go by, of the few that newer runs wrote
// read back, and of the zeros.
func (c *composer) fillFull(root *os.Root, abs, name string, f *rebuilt, size int64, r io.Reader) error {
	out, keep, err := c.reopen(root, abs, name, f)
	if err != nil {
		return err
	}
	sum, _ := newChecksum(c.algorithm) // nil: none, or one the manifest's rewrite reads back
	blocks := make([]uint32, min(int64(f.limit), size/blockSize))
	for i := range blocks {
		blocks[i] = uint32(i)
	}
	var seen func(b uint32, data []byte) error
	if sum != nil {
		back := make([]byte, blockSize)
		seen = func(b uint32, data []byte) error {
			if data == nil { // a newer run's block, in place
				if _, err := out.ReadAt(back, int64(b)*blockSize); err != nil {
					return fmt.Errorf("reading back block %d: %w", b, err)
				}
				data = back
			}
			sum.Write(data)
			return nil
		}
	}
	err = writeBlocks(out, r, blocks, f.wants, f, seen)
	if err == nil && seen != nil {
		// Past the copy: newer runs' blocks, and zeros.
		var zero [blockSize]byte
		for b := uint32(len(blocks)); b < f.length && err == nil; b++ {
			if f.has(b) {
				err = seen(b, nil)
			} else {
				err = seen(b, zero[:])
			}
		}
	}
	if err == nil {
		err = f.zeroFill(out)
	}
	f.left = 0 // the chain ends here for it, whatever happened
	err = c.release(out, keep, f, err)
	if err == nil {
		c.done(abs)
		if sum != nil {
			c.mu.Lock()
			c.sums[f.name] = fileSum{sum: checksumHex(sum), size: uint64(f.length) * blockSize}
			c.mu.Unlock()
		}
	}
	return err
}

// fileSum is a rebuilt file's checksum, as the manifest writes it, and
// size.
type fileSum struct {
	sum  string
	size uint64
}

// done forgets a file that has every block.
func (c *composer) done(abs string) {
	c.mu.Lock()
	delete(c.pending, abs)
	c.mu.Unlock()
}

// batchBlocks bounds the blocks written at once.
const batchBlocks = 128

// batches are the buffers writeBlocks gathers runs of blocks in: one
// per archive extracted at once, made once.
var batches = sync.Pool{New: func() any {
	b := make([]byte, 0, batchBlocks*blockSize)
	return &b
}}

// writeBlocks reads from r the blocks numbered blocks, in order, and
// writes those want picks at their place in out, runs of consecutive ones
// at once, marking them in f. seen, if not nil, sees each block's final
// content in order: the stream's, or nil for a block want passed over.
func writeBlocks(out *os.File, r io.Reader, blocks []uint32, want func(uint32) bool, f *rebuilt, seen func(b uint32, data []byte) error) error {
	var buf []byte
	defer func() {
		if buf != nil {
			batches.Put(&buf)
		}
	}()
	var first uint32
	flush := func() error {
		if len(buf) == 0 {
			return nil
		}
		_, err := out.WriteAt(buf, int64(first)*blockSize)
		buf = buf[:0]
		return err
	}
	var block [blockSize]byte
	for _, b := range blocks {
		if _, err := io.ReadFull(r, block[:]); err != nil {
			return fmt.Errorf("reading block %d: %w", b, err)
		}
		if !want(b) {
			if err := flush(); err != nil {
				return err
			}
			if seen != nil {
				if err := seen(b, nil); err != nil {
					return err
				}
			}
			continue
		}
		if seen != nil {
			if err := seen(b, block[:]); err != nil {
				return err
			}
		}
		if buf == nil {
			buf = (*batches.Get().(*[]byte))[:0]
		}
		if len(buf) > 0 && (b != first+uint32(len(buf)/blockSize) || len(buf) == cap(buf)) {
			if err := flush(); err != nil {
				return err
			}
		}
		if len(buf) == 0 {
			first = b
		}
		buf = append(buf, block[:]...)
		f.set(b)
	}
	return flush()
}

// zeroFill writes zeros where the file has no block yet: blocks no run
// of the chain holds, which the server left unwritten, as
// pg_combinebackup does (a hole would read the same, but leave the space
// unallocated).
func (f *rebuilt) zeroFill(out *os.File) error {
	var zero [blockSize]byte
	for b := uint32(0); b < f.length; b++ {
		if f.has(b) {
			continue
		}
		if _, err := out.WriteAt(zero[:], int64(b)*blockSize); err != nil {
			return err
		}
		f.set(b)
	}
	return nil
}

// endRun checks, after a run older than the newest, that it held every
// file still lacking blocks, as a full copy or an incremental one: a
// chain whose run lacks one cannot rebuild it (pg_combinebackup fails
// there too).
func (c *composer) endRun() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.newest() {
		return nil
	}
	var missing []string
	for abs, f := range c.pending {
		if !f.seen {
			missing = append(missing, abs)
		}
		f.seen = false
	}
	if len(missing) > 0 {
		return fmt.Errorf("run %s, which the chain needs for %s (and %d more files), holds neither a copy of it nor an incremental one: the chain is broken; restore another run (pipe backups lists them)", c.runID, missing[0], len(missing)-1)
	}
	if c.last() && len(c.pending) > 0 {
		for abs := range c.pending {
			return fmt.Errorf("the chain's full run %s holds only an incremental file for %s: it is not a full backup", c.runID, abs)
		}
	}
	return nil
}

// open opens the file name (abs on disk) of the archive extracted into
// root, through a root of its folder kept for the chain's restore: one
// openat per file instead of one per folder of its path, which os.Root
// walks without following a link out of it. A relation's files share a
// handful of folders (base/<database>, a tablespace's).
func (c *composer) open(root *os.Root, abs, name string, flag int, perm os.FileMode) (*os.File, error) {
	dir := filepath.Dir(abs)
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.roots[dir]
	if !ok {
		var err error
		if r, err = root.OpenRoot(filepath.Dir(name)); err != nil {
			return nil, err
		}
		if c.roots == nil {
			c.roots = map[string]*os.Root{}
		}
		c.roots[dir] = r
	}
	return r.OpenFile(filepath.Base(name), flag, perm)
}

// closeAll closes the folders' roots open kept, and the files.
func (c *composer) closeAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for dir, r := range c.roots {
		r.Close()
		delete(c.roots, dir)
	}
	for _, f := range c.pending {
		if f.file != nil {
			f.file.Close()
			f.file = nil
			c.kept--
		}
	}
}

// mkdirParent creates the folders name is in.
func mkdirParent(root *os.Root, name string) error {
	if dir := filepath.Dir(name); dir != "." {
		return root.MkdirAll(dir, 0o700)
	}
	return nil
}

// finishChain ends a chain's restore, after its full: the backup_label
// without its incremental lines, the newest run's manifest rewritten for
// the files rebuilt, and everything synced.
func (s *BaseSink) finishChain() error {
	s.chain.closeAll()
	dd := s.c.DataDirectory
	label := filepath.Join(dd, "backup_label")
	changed, err := stripLabel(label)
	if err != nil {
		return fmt.Errorf("rewriting backup_label: %w", sdk.ExplainIO(err))
	}
	if !changed {
		label = ""
	}
	if err := rewriteManifest(filepath.Join(dd, streamManifest), s.chain.rebuilt, s.chain.sums, s.chain.algorithm, label); err != nil {
		return fmt.Errorf("rewriting the backup manifest for the composed chain: %w", err)
	}
	s.mu.Lock()
	dirs := []string{dd}
	for _, dir := range s.spaces {
		dirs = append(dirs, dir)
	}
	s.mu.Unlock()
	for _, dir := range dirs {
		if err := errors.Join(untar.SyncTree(dir), untar.SyncDir(filepath.Dir(dir))); err != nil {
			return err
		}
	}
	return nil
}
