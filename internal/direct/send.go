package direct

import (
	"io"
	"os"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// FileSender is implemented by writers that hand a file to the object
// themselves, as SendFile does: pipe's stand-in for a plugin's object
// (plugins/host) does, so that the plugin reads the file pipe hands it. It reports
// whether the object took the file: false leaves it untouched, to be
// written as always.
type FileSender interface {
	SendFile(f *os.File, size int64, progress func(n int64)) (n int64, taken bool, err error)
}

// SendFile has w take its size bytes from f, a regular file, when w can
// (ReaderAtFrom or FileSender), and reports whether it did: when not, w is
// untouched. A failure to read f is a *ReadError.
func SendFile(w sdk.ObjectWriter, f *os.File, size int64, progress func(n int64)) (int64, bool, error) {
	switch x := w.(type) {
	case FileSender:
		return x.SendFile(f, size, progress)
	case sdk.ReaderAtFrom:
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
		return n, &sdk.ReadError{Err: sdk.ExplainIO(unwrapPath(err))}
	}
	return n, err
}
