package dedup

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// ListHeader is the first line of a chunk list; a list's format.
const ListHeader = "pipe-chunks/v1"

// A list is stored compressed, one zstd stream of its text: its lines are
// two digests in hex and a pack name that repeats, and compress to about a
// third (a list was a fifth of what a night of a mostly unchanged dump
// added to the store). Lists written before are plain text; readers take
// both, told apart by zstd's magic number.

// listWindow is the zstd window of a list written, and the most a reader
// takes: a list read is not a way to make pipe allocate.
const listWindow = 1 << 20

// ListMemory bounds what writing or reading one list holds beyond its
// line buffer: the zstd coder's window and tables (measured: 2.1 MiB to
// write, 1.7 MiB to read).
const ListMemory = 3 << 20

// zstdMagic starts every zstd frame (RFC 8878), and never a list's text.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// Loc is where a chunk's blob lies: in which pack, from which byte, how
// many bytes, and their SHA-256.
type Loc struct {
	Pack   string
	Offset int64
	Size   int64
	Sum    [sha256.Size]byte
}

// Ref is one line of a chunk list: a chunk of the stream and where it
// lies.
type Ref struct {
	ID    ID
	Plain int // the chunk's size
	Loc
}

// maxPlain bounds a chunk's size as a list may say it: the largest chunk
// any Sizes allows.
const maxPlain = 256 << 20

// appendRef appends r's line to b.
func appendRef(b []byte, r Ref) []byte {
	b = hex.AppendEncode(b, r.ID[:])
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.Plain), 10)
	b = append(b, ' ')
	b = append(b, r.Pack...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.Offset, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.Size, 10)
	b = append(b, ' ')
	b = hex.AppendEncode(b, r.Sum[:])
	return append(b, '\n')
}

// ListWriter writes a chunk list.
type ListWriter struct {
	w      io.Writer
	enc    *zstd.Encoder
	buf    []byte
	chunks int64
	plain  int64
}

// NewListWriter starts a list on w, compressed.
func NewListWriter(w io.Writer) *ListWriter {
	// One goroutine's coder, synchronous: a list left unclosed (its
	// stream failed) holds no goroutine.
	enc, err := zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(listWindow),
		zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithLowerEncoderMem(true))
	if err != nil {
		panic(err) // only for options that are not valid, and these are
	}
	return &ListWriter{w: enc, enc: enc, buf: append(make([]byte, 0, 64<<10), ListHeader+"\n"...)}
}

// Add appends one chunk.
func (l *ListWriter) Add(r Ref) error {
	l.buf = appendRef(l.buf, r)
	l.chunks++
	l.plain += int64(r.Plain)
	if len(l.buf) >= 60<<10 {
		return l.flush()
	}
	return nil
}

func (l *ListWriter) flush() error {
	_, err := l.w.Write(l.buf)
	l.buf = l.buf[:0]
	return err
}

// Close ends the list with its count.
func (l *ListWriter) Close() error {
	l.buf = fmt.Appendf(l.buf, "end %d %d\n", l.chunks, l.plain)
	if err := l.flush(); err != nil {
		return err
	}
	return l.enc.Close()
}

// ListReader reads a chunk list line by line.
type ListReader struct {
	s      *bufio.Scanner
	line   int
	chunks int64
	plain  int64
	packs  map[string]string // one string per pack name
	done   bool
}

// NewListReader reads the list r, compressed or not.
func NewListReader(r io.Reader) *ListReader {
	br := bufio.NewReaderSize(r, 4096)
	var text io.Reader = br
	if head, _ := br.Peek(len(zstdMagic)); bytes.Equal(head, zstdMagic) {
		dec, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(listWindow), zstd.WithDecoderMaxMemory(maxListText))
		if err != nil {
			panic(err) // only for options that are not valid, and these are
		}
		text = dec
	}
	s := bufio.NewScanner(text)
	s.Buffer(make([]byte, 0, 4096), 4096)
	return &ListReader{s: s, packs: map[string]string{}}
}

// maxListText bounds a list's text as a reader decompresses it: the list
// of a stream of a petabyte in the smallest chunks any Sizes allows.
const maxListText = 1 << 50

// Next returns the list's next chunk, or io.EOF after its end line. A
// list that ends before that line, or says anything else, is an error
// naming the line.
func (l *ListReader) Next() (Ref, error) {
	if l.done {
		return Ref{}, io.EOF
	}
	for l.s.Scan() {
		l.line++
		text := l.s.Text()
		if l.line == 1 {
			if text != ListHeader {
				return Ref{}, fmt.Errorf("not a chunk list (its first line is not %q)", ListHeader)
			}
			continue
		}
		if rest, ok := strings.CutPrefix(text, "end "); ok {
			if rest != fmt.Sprintf("%d %d", l.chunks, l.plain) {
				return Ref{}, fmt.Errorf("chunk list line %d: it ends with %q after %d chunks of %d bytes: the list is damaged", l.line, text, l.chunks, l.plain)
			}
			if l.s.Scan() {
				return Ref{}, fmt.Errorf("chunk list line %d: text after the end line", l.line+1)
			}
			if err := l.s.Err(); err != nil {
				return Ref{}, fmt.Errorf("chunk list after line %d: %w", l.line, err)
			}
			l.done = true
			return Ref{}, io.EOF
		}
		r, err := l.parse(text)
		if err != nil {
			return Ref{}, fmt.Errorf("chunk list line %d: %w", l.line, err)
		}
		l.chunks++
		l.plain += int64(r.Plain)
		return r, nil
	}
	if err := l.s.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return Ref{}, fmt.Errorf("chunk list line %d is too long: the list is damaged", l.line+1)
		}
		return Ref{}, err
	}
	if l.line == 0 {
		return Ref{}, errors.New("the chunk list is empty")
	}
	return Ref{}, fmt.Errorf("chunk list: it stops after line %d, without its end line: the list is cut short", l.line)
}

func (l *ListReader) parse(text string) (Ref, error) {
	f := strings.Split(text, " ")
	if len(f) != 6 {
		return Ref{}, fmt.Errorf("%d fields, want 6 (id, size, pack, offset, stored size, sha256)", len(f))
	}
	var r Ref
	if len(f[0]) != 2*len(r.ID) {
		return Ref{}, errors.New("the chunk id is not 64 hex digits")
	}
	if _, err := hex.Decode(r.ID[:], []byte(f[0])); err != nil {
		return Ref{}, errors.New("the chunk id is not 64 hex digits")
	}
	plain, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || plain <= 0 || plain > maxPlain {
		return Ref{}, fmt.Errorf("the chunk size %q is not between 1 and %d", f[1], maxPlain)
	}
	r.Plain = int(plain)
	if !validPack(f[2]) {
		return Ref{}, fmt.Errorf("%q is not a pack name", f[2])
	}
	p, ok := l.packs[f[2]]
	if !ok {
		p = strings.Clone(f[2])
		l.packs[p] = p
	}
	r.Pack = p
	if r.Offset, err = strconv.ParseInt(f[3], 10, 64); err != nil || r.Offset < 0 {
		return Ref{}, fmt.Errorf("the offset %q is not a byte offset", f[3])
	}
	if r.Size, err = strconv.ParseInt(f[4], 10, 64); err != nil || r.Size <= 0 || r.Size > 2*maxPlain {
		return Ref{}, fmt.Errorf("the stored size %q is out of range", f[4])
	}
	if len(f[5]) != 2*len(r.Sum) {
		return Ref{}, errors.New("the blob's sha256 is not 64 hex digits")
	}
	if _, err := hex.Decode(r.Sum[:], []byte(f[5])); err != nil {
		return Ref{}, errors.New("the blob's sha256 is not 64 hex digits")
	}
	return r, nil
}

// validPack reports whether name can be a pack's name: a plain file name
// (no folder, nothing hidden), so a list cannot point a restore elsewhere.
func validPack(name string) bool {
	if name == "" || len(name) > 200 || name[0] == '.' || !strings.HasSuffix(name, PackExt) {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}
