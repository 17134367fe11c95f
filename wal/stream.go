package wal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/zeebo/xxh3"
	"golang.org/x/sync/semaphore"

	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/wal/walname"
)

// Files stream through push and fetch: a push reads its file in blocks
// through the codec and encryption, and a fetch decodes the object into
// its file as it reads it. Neither holds a segment whole. What a process
// holds at once is bounded whatever the segment size and however many
// files are in flight (Memory):
//
//   - each file in flight: a block and age's chunk;
//   - the codec's state of each file being encoded or decoded: as many at
//     once as the process has CPUs (Coders), since more would only share
//     them; a push's upload and a prefetch's download wait for the
//     network without one. A push compresses in independent frames of
//     FrameSize (compress.FrameWriter), with an encoder reused from file
//     to file;
//   - the stored bytes of the objects pushes have encoded and not yet
//     stored, up to StoredMemory in all: an object's name carries the
//     digest of its stored bytes, so they are known whole before the
//     upload starts; beyond the bound they spill to a temporary file;
//   - what the store holds of the objects it is sending or receiving
//     (an object smaller than a part goes up from one buffer of its
//     size): a push or fetch waits until the objects in transfer leave
//     room for its own under TransferMemory, and one larger than that
//     waits for it all.

// blockSize is what push reads a file in, and what stored bytes are held
// in.
const blockSize = 256 << 10

// FrameSize is the size of the frames push compresses a file in: a WAL
// segment of 16 MiB in 1 MiB frames is stored within 1% of its size in
// one frame (0.3% more over twelve pgbench segments, with zstd level 3).
const FrameSize = 1 << 20

var blockPool = sync.Pool{New: func() any { b := make([]byte, blockSize); return &b }}

func getBlock() *[]byte  { return blockPool.Get().(*[]byte) }
func putBlock(b *[]byte) { blockPool.Put(b) }

// DefaultStoredMemory is StoredMemory when the archive does not say: the
// stored bytes of four compressed segments of typical WAL (a pgbench
// segment compresses to about 1 MiB at zstd level 3).
const DefaultStoredMemory = 4 << 20

// Memory is what one process's pushes and fetches hold at once with
// inFlight files in flight and coders codec states, besides the Go
// runtime and the store's buffers: inFlight × (a block, encryption's
// state), coders × the codec's state, and the stored bytes held
// (storedMemory).
func Memory(codec *compress.Codec, level int, encrypted bool, inFlight, coders int, storedMemory int64) int64 {
	per := int64(blockSize)
	if encrypted {
		per += encrypt.StreamMemory
	}
	b := int64(inFlight)*per + storedMemory
	if codec != nil {
		b += int64(min(coders, inFlight)) * codec.FrameMemory(level, FrameSize)
	}
	return b
}

// Coders is how many files a process encodes or decodes at once: its
// CPUs.
func Coders() int { return max(runtime.GOMAXPROCS(0), 1) }

// limits are an archive's process-wide memory bounds (see above).
type limits struct {
	coders   *semaphore.Weighted
	stored   *semaphore.Weighted
	transfer *semaphore.Weighted
	most     int64 // transfer's size
}

// limits returns the archive's bounds, made on first use.
func (a *Archive) limits() *limits {
	a.limitsOnce.Do(func() {
		stored := a.StoredMemory
		if stored <= 0 {
			stored = DefaultStoredMemory
		}
		most := a.TransferMemory
		if most <= 0 {
			most = a.MaxObject()
		}
		a.lim = &limits{coders: semaphore.NewWeighted(int64(Coders())), stored: semaphore.NewWeighted(stored), transfer: semaphore.NewWeighted(most), most: most}
	})
	return a.lim
}

// MaxObject is the largest object the archive stores: a segment (no WAL
// file is larger, and a segment is at most MaxFile), compressed (data
// that does not compress grows a little) and encrypted.
func (a *Archive) MaxObject() int64 {
	n := int64(a.SegmentSize)
	if n == 0 {
		n = MaxFile
	}
	return MaxObject(n, a.Codec != nil, a.Encrypt != nil || a.Decrypt != nil)
}

// MaxObject is the largest object of a segment of segSize bytes,
// compressed (when compressed, in frames of FrameSize) and encrypted
// (when encrypted).
func MaxObject(segSize int64, compressed, encrypted bool) int64 {
	n := segSize
	if compressed {
		n = compress.MaxStored(n, FrameSize)
	}
	if encrypted {
		n = encrypt.MaxStored(n)
	}
	return n
}

// inTransfer waits until an object of n bytes may be sent or received;
// done lets the next one go.
func (a *Archive) inTransfer(ctx context.Context, n int64) (done func(), err error) {
	l := a.limits()
	n = min(max(n, 1), l.most)
	if err := l.transfer.Acquire(ctx, n); err != nil {
		return nil, err
	}
	return func() { l.transfer.Release(n) }, nil
}

// stored holds an object's stored bytes as push encodes them, and their
// SHA-256: in blocks while the archive's StoredMemory has room, else in a
// temporary file in dir.
type stored struct {
	lim    *limits
	dir    string
	sum    hash.Hash
	blocks []*[]byte
	n      int64
	spill  *os.File
}

func (a *Archive) newStored() *stored {
	return &stored{lim: a.limits(), dir: a.SpillDir, sum: sha256.New()}
}

func (s *stored) Write(p []byte) (int, error) {
	_, _ = s.sum.Write(p) // a hash never fails
	written := len(p)
	for len(p) > 0 {
		if s.spill != nil {
			if _, err := s.spill.Write(p); err != nil {
				return 0, fmt.Errorf("spilling an encoded file: %w", err)
			}
			s.n += int64(len(p))
			return written, nil
		}
		off := int(s.n % blockSize)
		if off == 0 {
			if !s.lim.stored.TryAcquire(blockSize) {
				if err := s.spillOut(); err != nil {
					return 0, err
				}
				continue
			}
			s.blocks = append(s.blocks, getBlock())
		}
		k := copy((*s.blocks[len(s.blocks)-1])[off:], p)
		p = p[k:]
		s.n += int64(k)
	}
	return written, nil
}

// spillOut moves the blocks to a temporary file, which takes the rest.
func (s *stored) spillOut() error {
	f, err := os.CreateTemp(s.dir, ".pipe-spill-")
	if err != nil && s.dir != "" {
		f, err = os.CreateTemp("", ".pipe-spill-") // the spool's folder is not there (yet): the system's
	}
	if err != nil {
		return fmt.Errorf("spilling an encoded file (the archive's memory for stored bytes is taken): %w", err)
	}
	os.Remove(f.Name()) // gone with the process, whatever happens
	s.spill = f
	for i, b := range s.blocks {
		if _, err := f.Write((*b)[:min(blockSize, s.n-int64(i)*blockSize)]); err != nil {
			return fmt.Errorf("spilling an encoded file: %w", err)
		}
	}
	s.releaseBlocks()
	return nil
}

func (s *stored) releaseBlocks() {
	for _, b := range s.blocks {
		putBlock(b)
	}
	if len(s.blocks) > 0 {
		s.lim.stored.Release(int64(len(s.blocks)) * blockSize)
	}
	s.blocks = nil
}

// digest is the SHA-256 of the stored bytes, as an object's name says it.
func (s *stored) digest() string { return hex.EncodeToString(s.sum.Sum(nil)) }

// WriteTo writes the stored bytes to w.
func (s *stored) WriteTo(w io.Writer) (int64, error) {
	if s.spill == nil {
		var n int64
		for i, b := range s.blocks {
			k, err := w.Write((*b)[:min(blockSize, s.n-int64(i)*blockSize)])
			n += int64(k)
			if err != nil {
				return n, err
			}
		}
		return n, nil
	}
	buf := getBlock()
	defer putBlock(buf)
	return io.CopyBuffer(w, io.NewSectionReader(s.spill, 0, s.n), *buf)
}

// release gives the memory back and closes the spill file.
func (s *stored) release() {
	s.releaseBlocks()
	if s.spill != nil {
		s.spill.Close()
	}
}

// coding waits for a codec state (Coders); done lets the next one go.
func (a *Archive) coding(ctx context.Context) (done func(), err error) {
	l := a.limits()
	if a.Codec == nil {
		return func() {}, nil
	}
	if err := l.coders.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	return func() { l.coders.Release(1) }, nil
}

// frameWriter returns one of the archive's frame writers, made on first
// use: at most Coders are in use at once (coding).
func (a *Archive) frameWriter() (*compress.FrameWriter, error) {
	if fw, ok := a.frames.Get().(*compress.FrameWriter); ok {
		return fw, nil
	}
	return a.Codec.NewFrameWriter(a.Level, FrameSize)
}

// encodeFile reads size bytes of src in blocks through the archive's
// codec and encryption into stored bytes, and returns them and the
// file digest of what it read.
func (a *Archive) encodeFile(ctx context.Context, src io.ReaderAt, size int64) (st *stored, sum string, err error) {
	done, err := a.coding(ctx)
	if err != nil {
		return nil, "", err
	}
	defer done()
	st = a.newStored()
	defer func() {
		if err != nil {
			st.release()
		}
	}()
	var w io.Writer = st
	var closers []io.Closer // innermost first
	if a.Encrypt != nil {
		ew, err := encrypt.NewWriter(*a.Encrypt, w)
		if err != nil {
			return nil, "", fmt.Errorf("encrypting: %w", err)
		}
		w, closers = ew, append(closers, ew)
	}
	if a.Codec != nil {
		fw, err := a.frameWriter()
		if err != nil {
			return nil, "", fmt.Errorf("compressing: %w", err)
		}
		defer a.frames.Put(fw)
		fw.Reset(w)
		w, closers = fw, append([]io.Closer{fw}, closers...)
	}
	h := xxh3.New()
	err = readBlocks(src, size, func(b []byte) error {
		_, _ = h.Write(b) // a hash never fails
		_, err := w.Write(b)
		return err
	})
	for _, c := range closers {
		if cerr := c.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return nil, "", err
	}
	s := h.Sum128().Bytes()
	return st, hex.EncodeToString(s[:]), nil
}

// readBlocks passes the size bytes of src to fn a block at a time, and
// fails if src has more.
func readBlocks(src io.ReaderAt, size int64, fn func(b []byte) error) error {
	buf := getBlock()
	defer putBlock(buf)
	for off := int64(0); off < size; {
		n, err := src.ReadAt((*buf)[:min(blockSize, size-off)], off)
		if n > 0 {
			if ferr := fn((*buf)[:n]); ferr != nil {
				return ferr
			}
			off += int64(n)
		}
		switch {
		case errors.Is(err, io.EOF) && off < size:
			return fmt.Errorf("it shrank to %d bytes while it was read: PostgreSQL archives only complete files", off)
		case err != nil && !errors.Is(err, io.EOF):
			return err
		}
	}
	if n, _ := src.ReadAt((*buf)[:1], size); n > 0 {
		return errors.New("it grew while it was read: PostgreSQL archives only complete files")
	}
	return nil
}

// digestAt is the file digest of size bytes of src, in the hash of like
// (a file digest; "" for the archive's current one).
func digestAt(src io.ReaderAt, size int64, like string) (string, error) {
	h := newFileHasher(like)
	if err := readBlocks(src, size, func(b []byte) error { _, err := h.Write(b); return err }); err != nil {
		return "", err
	}
	return h.digest(), nil
}

// decodeFrom reads an object's stored bytes from r, decrypts and
// decompresses them into w as it reads, and checks the stored bytes
// against the digest in the object's name and what it wrote against the
// file's: what w received is good only without an error.
func (a *Archive) decodeFrom(ctx context.Context, o walname.Object, key string, r io.Reader, w io.Writer) error {
	in := a.newStoredReader(r)
	err := a.decodeStream(ctx, o, key, in, w)
	// The stored bytes' check first: a damaged object is named as one,
	// whatever its decoder made of it.
	if cerr := in.check(key, o.StoredSum); cerr != nil {
		return cerr
	}
	return err
}

// storedReader reads an object's stored bytes, at most one more than
// MaxObject, and hashes what it read with SHA-256, as an object's name
// carries it.
type storedReader struct {
	r    io.LimitedReader
	h    hash.Hash
	most int64
}

func (a *Archive) newStoredReader(r io.Reader) *storedReader {
	return &storedReader{r: io.LimitedReader{R: r, N: a.MaxObject() + 1}, h: sha256.New(), most: a.MaxObject()}
}

func (s *storedReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	_, _ = s.h.Write(p[:n]) // a hash never fails
	return n, err
}

// sum reads the rest (which a decoder need not read: a trailer, or what
// follows a damaged frame, is the object's too) and returns the digest of
// all that was read.
func (s *storedReader) sum(key string) (string, error) {
	buf := getBlock()
	defer putBlock(buf)
	if _, err := io.CopyBuffer(io.Discard, s, *buf); err != nil {
		return "", fmt.Errorf("reading %s: %w", key, err)
	}
	if s.r.N <= 0 {
		return "", fmt.Errorf("%s is larger than any object of a WAL file of this archive (%d bytes)", key, s.most)
	}
	return hex.EncodeToString(s.h.Sum(nil)), nil
}

// check is sum, against the digest in the object's name.
func (s *storedReader) check(key, want string) error {
	got, err := s.sum(key)
	if err == nil && got != want {
		err = fmt.Errorf("%s does not match the digest in its name: the object is corrupt or was tampered with", key)
	}
	return err
}

// decodeStream decrypts and decompresses an object's stored bytes from
// in into w, and checks what it wrote against the file's digest.
func (a *Archive) decodeStream(ctx context.Context, o walname.Object, key string, in io.Reader, w io.Writer) error {
	ext := o.Ext
	if len(ext) >= len(encrypt.Ext) && ext[len(ext)-len(encrypt.Ext):] == encrypt.Ext {
		if a.Decrypt == nil {
			return fmt.Errorf("%s is encrypted: add decrypt { identities = [file(\"…\")] } to the archive", key)
		}
		dr, err := encrypt.NewReader(*a.Decrypt, in)
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		in, ext = dr, ext[:len(ext)-len(encrypt.Ext)]
	}
	h := newFileHasher(o.FileSum)
	out := io.MultiWriter(w, h)
	if ext == "" {
		buf := getBlock()
		n, err := io.CopyBuffer(out, io.LimitReader(in, MaxFile+1), *buf)
		putBlock(buf)
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w", key, err)
		case n > MaxFile:
			return fmt.Errorf("%s is larger than any WAL file", key)
		}
	} else if c, ok := compress.ByExt(ext); !ok {
		return fmt.Errorf("%s: no codec for %q", key, ext)
	} else if err := c.DecodeStream(ctx, out, in, MaxFile); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if sum := h.digest(); sum != o.FileSum {
		return fmt.Errorf("%s decodes to other bytes than were archived (file digest %s): the object is corrupt or was tampered with", key, sum)
	}
	return nil
}
