package direct

import (
	"context"
	"errors"
	"io"
	"os"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Filler is implemented by sources that write a stream into a file
// themselves, as Fill does: pipe's stand-in for a plugin's source
// (plugins/host) does, so that the plugin writes the file pipe hands it.
type Filler interface {
	Fill(ctx context.Context, name string, f *os.File, progress, prefix func(n int64)) (int64, error)
}

// Fill writes the stream name of src into f, an empty regular file, from
// its first byte: with WriteAtTo when the stream has it, else in order.
// progress gets the size of every write as it is made, from several
// goroutines at once; prefix, if not nil, how far from the file's first
// byte every byte is written, each time that grows (ranges land in any
// order), never from two goroutines at once. Writing starts the disk's writeback of every whole
// 8 MiB block written, without waiting for it, so that the fsync of a
// commit finds little left to do (a last partial block is left to the
// fsync). It returns the bytes written.
func Fill(ctx context.Context, src sdk.Source, name string, f *os.File, progress, prefix func(n int64)) (int64, error) {
	if fl, ok := src.(Filler); ok {
		return fl.Fill(ctx, name, f, progress, prefix)
	}
	rc, err := src.Open(ctx, name)
	if err != nil {
		return 0, err
	}
	return FillFrom(ctx, rc, f, progress, prefix)
}

// FillFrom is Fill of a stream already open (with ctx), which it closes.
func FillFrom(ctx context.Context, rc io.ReadCloser, f *os.File, progress, prefix func(n int64)) (int64, error) {
	if fr, ok := rc.(sdk.FileReader); ok {
		// A read of a pipe or FIFO that ctx ended must return: it may
		// not look at ctx itself.
		defer context.AfterFunc(ctx, func() { _ = fr.File().SetReadDeadline(time.Now()) })()
	}
	w := &fileAt{f: f, progress: progress}
	if prefix != nil {
		w.written = &written{tell: prefix}
	}
	var err error
	var n int64
	if wt, ok := rc.(sdk.WriterAtTo); ok {
		n, err = wt.WriteAtTo(w)
	} else {
		// Through the buffer: a WriteTo of rc (an os.File's) would copy in 32 KiB.
		n, err = io.CopyBuffer(io.NewOffsetWriter(w, 0), struct{ io.Reader }{rc}, make([]byte, fillPiece))
		if fr, ok := rc.(sdk.FileReader); ok {
			fr.Done(err == nil) // read to its end through Read, or not
		}
	}
	if cerr := rc.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// fillPiece is the most a fill moves through its buffer at a time: small
// enough that what was just read into the buffer is still in a core's L2
// cache (512 KiB on this project's AMD EPYC machines) when the write copies
// it into the page cache. With 1 MiB that copy read it back from memory:
// in perf of a 2 GiB S3 download, 1.24 s in copy_folio_from_iter_atomic
// against rclone's 0.21 s, whose buffer is 128 KiB. The ranged reader's
// fillBuffer (one range of a WriterAtTo) is the same size for the same
// reason; it keeps its own, as the storage helpers import nothing of
// pipe's.
const fillPiece = 512 << 10

// writebackBlock is the unit of the writeback a fill starts: file-aligned
// blocks, each started once a write reaches its end. One sync_file_range
// per write made the disk's queue take a request (and this process a
// virtio kick) for every half MiB. A range's writes are in order, so the
// write that reaches a block's end completes it when the block lies in one
// range; a block shared by two ranges (ranges under 8 MiB) may start
// before the other's bytes are in, which leaves them to the fsync.
const writebackBlock = 8 << 20

// completedBlocks is the run of writeback blocks that a write of n bytes
// at off completes: from the block it starts in to the last block boundary
// it reaches (length 0 when it reaches none).
func completedBlocks(off, n int64) (start, length int64) {
	start = off / writebackBlock * writebackBlock
	end := (off + n) / writebackBlock * writebackBlock
	if end <= start {
		return 0, 0
	}
	return start, end - start
}

// unwrapPath drops the name of a descriptor handed over from err.
func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// fileAt writes a file at offsets, reports each write and starts the
// writeback of each block it completes.
type fileAt struct {
	f        *os.File
	progress func(int64)
	written  *written // nil: nobody asked how far the file is written
}

func (w *fileAt) WriteAt(p []byte, off int64) (int, error) {
	n, err := w.f.WriteAt(p, off)
	if n > 0 {
		if start, length := completedBlocks(off, int64(n)); length > 0 {
			sdk.StartWriteback(w.f, start, length)
		}
		if w.progress != nil {
			w.progress(int64(n))
		}
		if w.written != nil {
			w.written.add(off, int64(n))
		}
	}
	if err != nil {
		// The file's name here is no help (a descriptor pipe handed over):
		// the caller names the object.
		return n, &sdk.WriteError{Err: sdk.ExplainIO(unwrapPath(err))}
	}
	return n, nil
}

// written gathers the spans of a file written at offsets and tells how
// far from the file's first byte they reach without a gap, each time that
// grows. A fill's ranges each write in order, so the spans stay about as
// many as the ranges in flight.
type written struct {
	mu    sync.Mutex
	spans []span // sorted, disjoint, none touching the next
	told  int64
	tell  func(prefix int64)
}

type span struct{ start, end int64 }

func (w *written) add(off, n int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := span{off, off + n}
	// Merge with every span it touches or overlaps; keep the rest sorted.
	i := sort.Search(len(w.spans), func(i int) bool { return w.spans[i].end >= s.start })
	j := i
	for j < len(w.spans) && w.spans[j].start <= s.end {
		s.start, s.end = min(s.start, w.spans[j].start), max(s.end, w.spans[j].end)
		j++
	}
	w.spans = slices.Replace(w.spans, i, j, s)
	if i == 0 && s.start == 0 && s.end > w.told {
		w.told = s.end
		w.tell(s.end)
	}
}
