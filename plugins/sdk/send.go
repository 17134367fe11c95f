package sdk

import (
	"io"
	"os"
)

// ReaderAtFrom is implemented by an ObjectWriter that can take the whole
// object from r at once, reading sections of it in parallel (an object
// store's multipart upload sends each part from where it lies in the
// file), instead of being written in order. pipe uses it, before any
// Write, when a regular file goes unchanged into the object. progress gets
// the size of every section once it is sent. r may be closed once it
// returned; Commit and Abort follow as always.
type ReaderAtFrom interface {
	ReadAtFrom(r io.ReaderAt, size int64, progress func(n int64)) (int64, error)
}

// FileSender is implemented by writers that hand a file to the object
// themselves, as SendFile does; pipe's stand-in for a plugin's object
// does, so that the plugin reads the file pipe hands it. It reports
// whether the object took the file: false leaves it untouched, to be
// written as always.
type FileSender interface {
	SendFile(f *os.File, size int64, progress func(n int64)) (n int64, taken bool, err error)
}

// SendFile has w take its size bytes from f, a regular file, when w can
// (ReaderAtFrom or FileSender), and reports whether it did: when not, w is
// untouched. A failure to read f is a *ReadError.
func SendFile(w ObjectWriter, f *os.File, size int64, progress func(n int64)) (int64, bool, error) {
	switch x := w.(type) {
	case FileSender:
		return x.SendFile(f, size, progress)
	case ReaderAtFrom:
		n, err := x.ReadAtFrom(fileAtReader{f}, size, progress)
		return n, true, err
	}
	return 0, false, nil
}

// fileAtReader reads a file at offsets; its failures are ReadErrors.
type fileAtReader struct{ f *os.File }

func (r fileAtReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := r.f.ReadAt(p, off)
	if err != nil && err != io.EOF {
		return n, &ReadError{Err: ExplainIO(unwrapPath(err))}
	}
	return n, err
}

// ReadError is a SendFile that failed to read the file, not to send it:
// the source's failure, which pipe reports as the source's.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "reading the file: " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }
