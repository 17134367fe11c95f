// Package untar extracts tar streams into a folder without letting any
// entry reach outside it, and makes what it extracted durable.
package untar

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Writer extracts the tar stream written to it into a folder as the bytes
// arrive (see Extract), in a goroutine of its own.
type Writer struct {
	pw     *io.PipeWriter
	result chan error
	ended  bool
	err    error
}

// NewWriter starts extracting into the folder dir, which exists; rename is
// as for Extract.
func NewWriter(dir string, rename func(string) string) (*Writer, error) {
	return NewWriterHook(dir, rename, nil)
}

// Hook sees each entry of a stream before it is extracted, under the name
// it would be written as: it returns true when it took the entry itself
// (reading what it wants of the entry's data from r: the rest is
// skipped), false to have it extracted as usual.
type Hook func(root *os.Root, name string, h *tar.Header, r io.Reader) (bool, error)

// NewWriterHook is NewWriter with a hook (nil: none) that may take
// entries itself.
func NewWriterHook(dir string, rename func(string) string, hook Hook) (*Writer, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	w := &Writer{pw: pw, result: make(chan error, 1)}
	go func() {
		err := ExtractHook(root, pr, rename, hook)
		root.Close()
		pr.CloseWithError(err) // unblock the writer if extraction stopped early
		w.result <- err
	}()
	return w, nil
}

// Write hands bytes of the stream to the extraction; it fails once the
// extraction stopped.
func (w *Writer) Write(p []byte) (int, error) { return w.pw.Write(p) }

// Close ends the stream and returns how the extraction ended. Later calls
// (and Abort) return the same.
func (w *Writer) Close() error { return w.end(nil) }

// Abort stops the extraction where it is and waits for it.
func (w *Writer) Abort() { w.end(errors.New("aborted")) } //nolint:errcheck // an abort's own error

func (w *Writer) end(stop error) error {
	if !w.ended {
		w.ended = true
		w.pw.CloseWithError(stop) // nil: the stream's end
		w.err = <-w.result
	}
	return w.err
}

// Extract writes the entries of the tar stream r into root: folders,
// regular files, hard links within root and symbolic links (os.Root keeps
// every later entry from following one outside). Devices and fifos are
// skipped. It refuses what a hostile archive could use to escape or to
// exhaust the target: names outside root, absurd names and depths, sparse
// files. It reads r to its end. rename, if not nil, gives the name each
// entry is written under (a restore that holds a file back until the end).
func Extract(root *os.Root, r io.Reader, rename func(string) string) error {
	return ExtractHook(root, r, rename, nil)
}

// ExtractHook is Extract with a hook (nil: none) that may take entries
// itself.
func ExtractHook(root *os.Root, r io.Reader, rename func(string) string, hook Hook) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			// Read to the end so the writer side never blocks on padding.
			_, err = io.Copy(io.Discard, r)
			return err
		}
		if err != nil {
			return fmt.Errorf("not a valid tar stream: %w", err)
		}
		name, err := entryName(h, rename)
		if err != nil {
			return err
		}
		if hook != nil {
			took, err := hook(root, name, h, tr)
			if err != nil {
				return fmt.Errorf("tar entry %q: %w", h.Name, err)
			}
			if took {
				continue
			}
		}
		if err := extractEntry(root, tr, h, name); err != nil {
			return err
		}
	}
}

// entryName returns the name, inside the target folder, that the entry h
// is written under, or why the entry is refused.
func entryName(h *tar.Header, rename func(string) string) (string, error) {
	name := filepath.FromSlash(filepath.Clean(h.Name))
	if !iofs.ValidPath(filepath.ToSlash(name)) {
		return "", fmt.Errorf("tar entry %q points outside the target folder", h.Name)
	}
	// A path no file system tool could use, folders nested by the
	// thousand, or a sparse file whose few bytes expand to terabytes
	// of zeros: a hostile archive's ways to exhaust the target.
	if len(h.Name) > maxEntryName || strings.Count(name, string(filepath.Separator)) >= maxEntryDepth {
		return "", fmt.Errorf("tar entry %.80q…: a name of %d bytes and %d levels is beyond what pipe extracts (%d bytes, %d levels)", h.Name, len(h.Name), strings.Count(name, string(filepath.Separator))+1, maxEntryName, maxEntryDepth)
	}
	if h.Typeflag == tar.TypeGNUSparse || hasSparse(h) {
		return "", fmt.Errorf("tar entry %q is a sparse file, which pipe does not extract: archive it without sparse handling (GNU tar without --sparse)", h.Name)
	}
	if rename != nil {
		if name = rename(name); !iofs.ValidPath(filepath.ToSlash(name)) {
			return "", fmt.Errorf("tar entry %q renamed outside the target folder", h.Name)
		}
	}
	return name, nil
}

// extractEntry writes the entry h, whose data tr reads next, as name.
func extractEntry(root *os.Root, tr *tar.Reader, h *tar.Header, name string) error {
	mode := os.FileMode(h.Mode).Perm()
	switch h.Typeflag {
	case tar.TypeDir:
		if err := root.MkdirAll(name, 0o700); err != nil {
			return err
		}
		if err := root.Chmod(name, mode|0o700); err != nil {
			return err
		}
	case tar.TypeReg:
		return extractFile(root, tr, name, mode)
	case tar.TypeLink:
		// A second name of a file extracted before (tar records the
		// first name and links the others to it).
		target := filepath.FromSlash(filepath.Clean(h.Linkname))
		if !iofs.ValidPath(filepath.ToSlash(target)) {
			return fmt.Errorf("tar entry %q links to %q, outside the target folder", h.Name, h.Linkname)
		}
		if err := mkdirParent(root, name); err != nil {
			return err
		}
		if err := root.Link(target, name); err != nil {
			return fmt.Errorf("tar entry %q: %w", h.Name, err)
		}
	case tar.TypeSymlink:
		if err := mkdirParent(root, name); err != nil {
			return err
		}
		if err := root.Symlink(h.Linkname, name); err != nil {
			return err
		}
	default:
		// Devices and fifos hold no data; they are not restored.
	}
	return nil
}

// extractFile writes the regular file name, whose bytes tr reads next.
func extractFile(root *os.Root, tr *tar.Reader, name string, mode os.FileMode) error {
	if err := mkdirParent(root, name); err != nil {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	fw := &flusher{f: f}
	_, err = io.Copy(fw, tr)
	fw.flush()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// mkdirParent creates the folders name is in.
func mkdirParent(root *os.Root, name string) error {
	if dir := filepath.Dir(name); dir != "." {
		return root.MkdirAll(dir, 0o700)
	}
	return nil
}

// What extract accepts of an entry's name: PATH_MAX, and a depth no real
// folder tree reaches.
const (
	maxEntryName  = 4096
	maxEntryDepth = 256
)

// hasSparse reports whether a PAX header describes a GNU sparse file.
func hasSparse(h *tar.Header) bool {
	for k := range h.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// EmptyDir removes everything inside dir, which stays; a dir that does
// not exist is empty.
func EmptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
	}
	return errors.Join(errs...)
}

// SyncTree fsyncs every file and folder under dir, deepest first.
func SyncTree(dir string) error {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() || d.IsDir() {
			paths = append(paths, p)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i := len(paths) - 1; i >= 0; i-- {
		if err := SyncDir(paths[i]); err != nil {
			return err
		}
	}
	return nil
}

// SyncDir fsyncs one file or folder.
func SyncDir(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", p, err)
	}
	return nil
}

// flushEvery is how much of a file is written before its writeback is
// started.
const flushEvery = 8 << 20

// flusher writes a file and starts the writeback of each flushEvery bytes
// of it as they are written (startWriteback, which does not wait), and
// of the rest at flush: the disk writes while the stream is extracted, and
// the fsync after it (SyncTree) finds the data written or under way, as
// PostgreSQL flushes its own files (its *_flush_after settings). On a
// 1.3 GB tree it cut extraction and fsync from 2.57 s to 1.95 s (means of
// six, bench/reports/2026-11-26-untar-writeback.md).
type flusher struct {
	f               *os.File
	written, queued int64
}

func (w *flusher) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.written += int64(n)
	if w.written-w.queued >= flushEvery {
		w.flush()
	}
	return n, err
}

// flush starts the writeback of what was written since the last one.
func (w *flusher) flush() {
	if w.written > w.queued {
		startWriteback(w.f, w.queued, w.written-w.queued)
		w.queued = w.written
	}
}
