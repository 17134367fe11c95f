package compress

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/pipebackup/pipe/engine"
)

func init() {
	register(&Codec{
		Name: "zstd", Ext: ".zst", MinLevel: 1, MaxLevel: 22, DefaultLevel: 3,
		newEncoder: newZstdEncoder,
		decoder:    func(workers int) any { return zstdDecoders{} },
		encMemory: func(level, chunk int) int64 {
			// Match tables plus a history of up to one chunk.
			tables := int64(4 << 20)
			if zstd.EncoderLevelFromZstd(level) >= zstd.SpeedBetterCompression {
				tables = 16 << 20
			}
			return tables + int64(chunk)
		},
		decMemory: func(chunk int) int64 { return 2<<20 + int64(chunk)/4 },
	})
}

// zstdDecoders decompress the frames of a stream in parallel; a frame whose
// size is unknown or larger than a buffer (a single-frame file from the zstd
// tool, say) switches the rest of the stream to a streaming decoder.
type zstdDecoders struct{}

func (zstdDecoders) NewWorker() (engine.Worker, error) { return newZstdDecoder() }

func (zstdDecoders) Rest(ctx context.Context, dst io.Writer, src io.Reader) error {
	dec, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(2))
	if err != nil {
		return err
	}
	defer dec.Close()
	if _, err := dec.WriteTo(dst); err != nil {
		return fmt.Errorf("corrupt zstd data: %w", err)
	}
	return nil
}

// decodeFrame is the largest frame content Decode decodes a frame at a
// time, into one buffer: a WAL object's frames hold 1 MiB of the file. A
// larger frame, or one whose size neither its header nor its blocks bound
// within that, decodes the rest of the stream with the streaming decoder.
const decodeFrame = 1 << 20

// frameDecoder is a frame decoder (libzstd's with cgo) and its buffers.
type frameDecoder struct {
	w       engine.Worker
	in, out []byte
}

// decoderPool holds Decode's frame decoders: a WAL prefetcher decodes
// hundreds of segments one after another (several at once), and a new
// decoder allocates its state and buffers again for each.
var decoderPool = sync.Pool{New: func() any {
	w, err := newZstdDecoder()
	if err != nil {
		return err
	}
	n := Bound(decodeFrame)
	return &frameDecoder{w: w, in: make([]byte, 0, n), out: make([]byte, 0, n)}
}}

// Decode decodes src into dst in the calling goroutine, a frame at a
// time with a pooled frame decoder: for callers that decode many small
// objects at once (WAL segments), where the streaming decoder's
// goroutines and buffers per object cost more than they bring. Each
// frame is decoded whole into a buffer and written with one Write (with
// cgo by libzstd, about 1.5× the pure-Go streaming decoder's speed).
func (d zstdDecoders) Decode(dst io.Writer, src io.Reader) error {
	v := decoderPool.Get()
	fd, ok := v.(*frameDecoder)
	if !ok {
		return v.(error)
	}
	defer decoderPool.Put(fd)
	for {
		unit, err := d.NextUnit(src, fd.in[:0])
		switch {
		case errors.Is(err, io.EOF):
			return nil
		case errors.Is(err, engine.ErrUnitTooLarge):
			return d.Rest(context.Background(), dst, io.MultiReader(bytes.NewReader(unit), src))
		case err != nil:
			return err
		}
		out, err := fd.w.Map(fd.out[:0], unit)
		if err != nil {
			return err
		}
		if _, err := dst.Write(out); err != nil {
			return err
		}
	}
}

const (
	zstdMagic         = 0xFD2FB528
	skippableMagicLo  = 0x184D2A50
	skippableMagicHi  = 0x184D2A5F
	zstdBlockRaw      = 0
	zstdBlockRLE      = 1
	zstdBlockReserved = 3
)

var errTruncated = errors.New("truncated zstd frame: the data is incomplete")

// truncated is the error of a read within a frame that failed: errTruncated
// where the data ended, else the reader's own (a network or decryption
// failure says what it is).
func truncated(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errTruncated
	}
	return err
}

// NextUnit copies the next frame into buf, walking its block headers (no
// decoding). Skippable frames are dropped.
func (zstdDecoders) NextUnit(r io.Reader, buf []byte) ([]byte, error) {
	magic, err := skipToZstdFrame(r)
	if err != nil {
		return nil, err
	}
	buf = append(buf, magic[:]...)
	buf, fh, err := copyZstdFrameHeader(r, buf)
	if err != nil {
		return nil, err
	}
	// The output must fit in one buffer, which has the capacity of buf: the
	// frame content size says so exactly; without it, the block headers
	// bound it (a compressed block yields at most min(window, 128 KiB)).
	if fh.fcs > int64(cap(buf)) {
		return buf, engine.ErrUnitTooLarge
	}
	buf, err = copyZstdBlocks(r, buf, fh)
	if err != nil || !fh.checksum {
		return buf, err
	}
	if len(buf)+4 > cap(buf) {
		return buf, engine.ErrUnitTooLarge
	}
	start := len(buf)
	buf = buf[:start+4]
	if _, err := io.ReadFull(r, buf[start:]); err != nil {
		return nil, truncated(err)
	}
	return buf, nil
}

// skipToZstdFrame reads r up to the magic number of the next zstd frame,
// dropping skippable frames, and returns that magic number.
func skipToZstdFrame(r io.Reader) ([4]byte, error) {
	var magic [4]byte
	for {
		if _, err := io.ReadFull(r, magic[:]); err != nil {
			if err == io.ErrUnexpectedEOF {
				return magic, errTruncated
			}
			return magic, err
		}
		m := binary.LittleEndian.Uint32(magic[:])
		if m < skippableMagicLo || m > skippableMagicHi {
			if m != zstdMagic {
				return magic, fmt.Errorf("not zstd data (magic %08x)", m)
			}
			return magic, nil
		}
		var size [4]byte
		if _, err := io.ReadFull(r, size[:]); err != nil {
			return magic, truncated(err)
		}
		if _, err := io.CopyN(io.Discard, r, int64(binary.LittleEndian.Uint32(size[:]))); err != nil {
			return magic, truncated(err)
		}
	}
}

// zstdFrameHeader is what NextUnit needs of a frame header.
type zstdFrameHeader struct {
	checksum bool  // a content checksum follows the last block
	fcs      int64 // the frame content size, -1 when the header omits it
	maxBlock int64 // the most a compressed block of the frame decodes to
}

// copyZstdFrameHeader appends the frame header that follows the magic
// number from r to buf, and reads it.
func copyZstdFrameHeader(r io.Reader, buf []byte) ([]byte, zstdFrameHeader, error) {
	var fhd [1]byte
	if _, err := io.ReadFull(r, fhd[:]); err != nil {
		return nil, zstdFrameHeader{}, truncated(err)
	}
	buf = append(buf, fhd[0])
	d := fhd[0]
	single := d&0x20 != 0
	dictSize := [4]int{0, 1, 2, 4}[d&3]
	fcsSize := [4]int{0, 2, 4, 8}[d>>6]
	if fcsSize == 0 && single {
		fcsSize = 1
	}
	n := dictSize + fcsSize
	if !single {
		n++
	}
	hdr := make([]byte, n)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, zstdFrameHeader{}, truncated(err)
	}
	buf = append(buf, hdr...)
	fh := zstdFrameHeader{checksum: d&0x04 != 0, fcs: -1, maxBlock: 128 << 10}
	if fcsSize > 0 {
		fh.fcs = zstdContentSize(hdr[n-fcsSize:])
	}
	if !single {
		fh.maxBlock = min(fh.maxBlock, zstdWindowSize(hdr[0]))
	}
	return buf, fh, nil
}

// zstdContentSize decodes a frame content size field of 1, 2, 4 or 8
// bytes.
func zstdContentSize(f []byte) int64 {
	switch len(f) {
	case 1:
		return int64(f[0])
	case 2:
		return int64(binary.LittleEndian.Uint16(f)) + 256
	case 4:
		return int64(binary.LittleEndian.Uint32(f))
	case 8:
		return int64(binary.LittleEndian.Uint64(f) & (1<<62 - 1))
	}
	return -1
}

// zstdWindowSize decodes a window descriptor byte.
func zstdWindowSize(wd byte) int64 {
	windowLog := 10 + uint(wd>>3)
	return int64(1)<<windowLog + (int64(1)<<windowLog)/8*int64(wd&7)
}

// copyZstdBlocks appends the blocks of the frame fh describes from r to
// buf, up to and with the last one. A frame that does not fit in buf's
// capacity, or whose output may not (fh.fcs unknown), ends with
// engine.ErrUnitTooLarge and buf as far as it got.
func copyZstdBlocks(r io.Reader, buf []byte, fh zstdFrameHeader) ([]byte, error) {
	var bh [3]byte
	bound := int64(0)
	for {
		if _, err := io.ReadFull(r, bh[:]); err != nil {
			return nil, truncated(err)
		}
		h := uint32(bh[0]) | uint32(bh[1])<<8 | uint32(bh[2])<<16
		last := h&1 != 0
		typ := (h >> 1) & 3
		size := int(h >> 3)
		body := size
		switch typ {
		case zstdBlockRaw:
			bound += int64(size)
		case zstdBlockRLE:
			bound += int64(size)
			body = 1
		case zstdBlockReserved:
			return nil, errors.New("corrupt zstd data: reserved block type")
		default:
			bound += fh.maxBlock
		}
		if len(buf)+3+body > cap(buf) || (fh.fcs < 0 && bound > int64(cap(buf))) {
			return append(buf, bh[:]...), engine.ErrUnitTooLarge
		}
		buf = append(buf, bh[:]...)
		start := len(buf)
		buf = buf[:start+body]
		if _, err := io.ReadFull(r, buf[start:]); err != nil {
			return nil, truncated(err)
		}
		if last {
			return buf, nil
		}
	}
}
