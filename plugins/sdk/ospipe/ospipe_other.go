//go:build !linux

package ospipe

import (
	"os"
)

// New returns an os.Pipe: only Linux's pipes are tuned.
func New() (r, w *os.File, err error) { return os.Pipe() }

// Read reads f as it is.
func (r *Reader) Read(p []byte) (int, error) {
	if err := r.stopped(r.ctx); err != nil {
		return 0, err
	}
	return r.f.Read(p)
}

// Write writes f as it is.
func (w *Writer) Write(p []byte) (int, error) {
	if err := w.stopped(w.ctx); err != nil {
		return 0, err
	}
	return w.f.Write(p)
}

// Grow keeps the system's pipe buffer: only Linux can change it.
func Grow(f *os.File) {}
