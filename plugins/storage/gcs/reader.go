package gcs

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/ranged"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errChanged is a read whose object changed (or vanished) under it.
var errChanged = errors.New("the object changed while it was read")

// rangeOptions say how to read one object of a known size.
type rangeOptions struct {
	size, part int64
	conc       int
	retries    int
	crc        uint32
	checkCRC   bool
	explain    func(op string, err error) error
}

// openRanges reads an object of a known size as parallel ranges (see
// package ranged), each opened by fetch (pinned to one generation), and
// compares the CRC32C of what it handed on with the object's at the end
// when o.checkCRC.
func openRanges(ctx context.Context, fetch ranged.Fetch, o rangeOptions) (io.ReadCloser, error) {
	rc, err := ranged.Open(ctx, ranged.Options{
		Log:  sdk.Log().With("endpoint", "gcs"),
		Size: o.size, Fetch: fetch, PartSize: o.part, Concurrency: o.conc,
		Retries: o.retries, Retryable: retriable, Explain: o.explain,
	})
	if err != nil || !o.checkCRC {
		return rc, err
	}
	return &crcReader{rc: rc, want: o.crc, explain: o.explain}, nil
}

// crcReader checks the CRC32C of an object's bytes as they are read.
type crcReader struct {
	rc      io.ReadCloser
	want    uint32
	crc     uint32
	err     error
	explain func(op string, err error) error
}

func (r *crcReader) Read(b []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	n, err := r.rc.Read(b)
	r.crc = crc32.Update(r.crc, castagnoli, b[:n])
	if err == io.EOF && r.crc != r.want {
		err = r.explain("reading", fmt.Errorf("the bytes read have CRC32C %08x, the object's is %08x: %w", r.crc, r.want, errChanged))
	}
	if err != nil {
		r.err = err
	}
	return n, err
}

func (r *crcReader) Close() error { return r.rc.Close() }
