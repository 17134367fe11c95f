package engine

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
)

// framer is a Mapper that wraps each chunk in a length-prefixed frame; its
// inverse unframer is a Splitter. Together they behave like a per-chunk
// compressor and its parallel decompressor.
type framer struct{ delay func() }

func (f framer) NewWorker() (Worker, error) { return f, nil }
func (f framer) Map(dst, src []byte) ([]byte, error) {
	if f.delay != nil {
		f.delay()
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(src)))
	for _, b := range src {
		dst = append(dst, b^0x5a)
	}
	return dst, nil
}

type unframer struct{ failOn byte }

func (u unframer) NewWorker() (Worker, error) { return u, nil }
func (u unframer) Map(dst, src []byte) ([]byte, error) {
	body := src[4:]
	for _, b := range body {
		if u.failOn != 0 && b^0x5a == u.failOn {
			return nil, errors.New("bad byte")
		}
		dst = append(dst, b^0x5a)
	}
	return dst, nil
}

func (u unframer) NextUnit(r io.Reader, buf []byte) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return nil, errors.New("truncated frame header")
		}
		return nil, err
	}
	n := int(binary.BigEndian.Uint32(h[:]))
	buf = append(buf, h[:]...)
	if 4+n > cap(buf) {
		return buf, ErrUnitTooLarge
	}
	buf = buf[:4+n]
	if _, err := io.ReadFull(r, buf[4:]); err != nil {
		return nil, fmt.Errorf("truncated frame: %w", err)
	}
	return buf, nil
}

func (u unframer) Rest(ctx context.Context, dst io.Writer, src io.Reader) error {
	var h [4]byte
	for {
		if _, err := io.ReadFull(src, h[:]); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		n := int64(binary.BigEndian.Uint32(h[:]))
		buf := make([]byte, 64<<10)
		for n > 0 {
			k, err := src.Read(buf[:min(int64(len(buf)), n)])
			for i := range buf[:k] {
				buf[i] ^= 0x5a
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return werr
			}
			n -= int64(k)
			if err != nil && n > 0 {
				return fmt.Errorf("truncated frame: %w", err)
			}
		}
	}
}

// rot is a Streamer that adds one to every byte.
type rot struct{ by byte }

func (r rot) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	buf := make([]byte, 1000)
	for {
		n, err := src.Read(buf)
		for i := range buf[:n] {
			buf[i] += r.by
		}
		if _, werr := dst.Write(buf[:n]); werr != nil {
			return werr
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// digest is an Observer computing SHA-256; want, if set, is checked.
type digest struct{ want map[string]string }

func (d digest) Observe(stream string) Observation {
	return &digestObs{h: sha256.New(), want: d.want[stream]}
}

type digestObs struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	want string
}

func (o *digestObs) Write(p []byte) (int, error) { return o.h.Write(p) }
func (o *digestObs) Finish() (string, error) {
	got := hex.EncodeToString(o.h.Sum(nil))
	if o.want != "" && got != o.want {
		return got, fmt.Errorf("digest mismatch: got %s, want %s", got, o.want)
	}
	return got, nil
}
