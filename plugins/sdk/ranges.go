package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// RangeOpener is implemented by storage that reads part of an object
// without the rest: a deduplicating store's restore reads each chunk
// from the pack that holds it. key is what Open takes.
type RangeOpener interface {
	OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error)
}

// Opener opens an object whole: a Source's or a Storage's Open.
type Opener interface {
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// OpenRange reads length bytes of the object at key from offset on with
// o: its own OpenRange when it has one, else Open, seeking to offset (a
// file) or reading past it. Its reader gives exactly length bytes, and an
// error wrapping io.ErrUnexpectedEOF when the object ends before.
func OpenRange(ctx context.Context, o Opener, key string, offset, length int64) (io.ReadCloser, error) {
	if offset < 0 || length <= 0 {
		return nil, fmt.Errorf("reading %s: %d bytes at %d is not a range", key, length, offset)
	}
	var rc io.ReadCloser
	var err error
	if ro, ok := o.(RangeOpener); ok {
		rc, err = ro.OpenRange(ctx, key, offset, length)
	} else if rc, err = o.Open(ctx, key); err == nil {
		err = skip(rc, offset)
		if err != nil {
			rc.Close()
			err = fmt.Errorf("reading %s up to byte %d: %w", key, offset, err)
		}
	}
	if err != nil {
		return nil, err
	}
	return &exactReader{rc: rc, left: length, key: key, end: offset + length}, nil
}

// skip moves r past its first n bytes.
func skip(r io.Reader, n int64) error {
	if s, ok := r.(io.Seeker); ok {
		if _, err := s.Seek(n, io.SeekStart); err == nil {
			return nil
		}
	}
	k, err := io.CopyN(io.Discard, r, n)
	if k < n && (err == nil || errors.Is(err, io.EOF)) {
		err = io.ErrUnexpectedEOF
	}
	return err
}

// exactReader ends after left bytes, and fails if its object ends first.
type exactReader struct {
	rc   io.ReadCloser
	left int64
	key  string
	end  int64
}

func (r *exactReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.rc.Read(p)
	r.left -= int64(n)
	switch {
	case r.left == 0:
		return n, io.EOF
	case errors.Is(err, io.EOF):
		return n, fmt.Errorf("%s ends %d bytes before byte %d: %w", r.key, r.left, r.end, io.ErrUnexpectedEOF)
	}
	return n, err
}

func (r *exactReader) Close() error { return r.rc.Close() }
