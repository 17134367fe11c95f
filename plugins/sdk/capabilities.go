package sdk

import "io"

// The optional capabilities of a stream and of an object writer that let
// pipe move a whole file without passing it through chunks, and the errors
// that say which side such a move failed on. pipe's side of these moves
// (the fill of a file, the hand-over of a file) is in pipe's
// internal/direct, which plugin authors do not need.

// WriterAtTo is implemented by a stream (what Source.Open returns) that can
// write itself into w at its own offsets, in parallel and out of order (an
// object store's ranged download writes each range where it belongs),
// instead of being read in order. pipe uses it, before any Read, when a
// stream goes unchanged into a file: a restore without stages into the fs
// sink. It returns the bytes written; the stream is closed after it, as
// after reading.
type WriterAtTo interface {
	WriteAtTo(w io.WriterAt) (int64, error)
}

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

// WriteError is a fill of a file from a stream (a WriterAtTo's, or pipe's
// copy) that failed to write the file, not to read the stream: the sink's
// failure (a full disk, say), which pipe reports as the sink's.
type WriteError struct{ Err error }

func (e *WriteError) Error() string { return e.Err.Error() }
func (e *WriteError) Unwrap() error { return e.Err }

// ReadError is a failure to read the file an object takes at once (the
// io.ReaderAt given to ReaderAtFrom), not to send it: the source's
// failure, which pipe reports as the source's. A ReaderAtFrom passes it on
// as it is.
type ReadError struct{ Err error }

func (e *ReadError) Error() string { return "reading the file: " + e.Err.Error() }
func (e *ReadError) Unwrap() error { return e.Err }
