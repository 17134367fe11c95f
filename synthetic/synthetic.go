// Package synthetic generates deterministic data that looks and compresses
// like a database dump, fast enough never to be the bottleneck of a
// benchmark: `pipe bench --synthetic` reads it instead of a pipeline's own
// source, so a pipeline can be tuned without a database at hand.
//
// The data is the text of a PostgreSQL COPY of an orders table: ids,
// customer numbers, timestamps, amounts, statuses, e-mail addresses and
// free-text notes, one row per line. Rows are drawn from a corpus of
// templates built once from a seeded PRNG; each row gets fresh random
// digits where a real table's values vary (ids, minutes, cents), so
// compressors find the structure a dump has but cannot reduce it to
// repeats. It compresses about as real dumps do: zstd -3 in 4 MiB frames
// (as pipe's compress stage cuts them) 4.0× (TestRatio checks 3-5×); the
// zstd command on 64 MiB 4.05× at -3 and 3.2× at -1, gzip -6 3.4×.
//
// A reader copies a template row and writes a dozen digits per row of
// ~130 bytes: about 2 GB/s on one core of a shared 2-CPU machine
// (BenchmarkRead), faster than any stage that reads it.
//
// `make bench` has a generator of its own (bench/gen.go): a byte-frozen data
// set for comparing pipe with other tools across commits, slower (~350
// MB/s) and less compressible (2.8x). This one may change its bytes when a
// better imitation of a dump is found; the harness's may not.
package synthetic

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Type names the synthetic source in reports.
const Type = "synthetic"

// Source yields Streams streams of Size bytes each. It implements
// sdk.Source.
type Source struct {
	Count int
	Size  int64
	// Seed makes different data; the same seed gives the same bytes.
	Seed uint64
}

var _ sdk.Source = (*Source)(nil)

// New returns a source of n streams of size bytes each.
func New(n int, size int64) *Source {
	return &Source{Count: n, Size: size, Seed: 1}
}

// Name returns the name of the i-th stream (from 0).
func Name(i int) string { return fmt.Sprintf("synthetic-%03d.sql", i+1) }

// Streams lists the streams: synthetic-001.sql, synthetic-002.sql, …
func (s *Source) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	out := make([]sdk.StreamInfo, s.Count)
	for i := range out {
		out[i] = sdk.StreamInfo{Name: Name(i), Size: s.Size}
	}
	return out, nil
}

// Open returns a reader of the named stream's bytes.
func (s *Source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	for i := range s.Count {
		if Name(i) == name {
			return io.NopCloser(NewReader(s.Seed*1000003+uint64(i), s.Size)), nil
		}
	}
	return nil, fmt.Errorf("synthetic source has no stream %q: %w", name, sdk.ErrNotFound)
}

// row is one template row and the offsets of its varying digits.
type row struct {
	text []byte
	vary []uint16
}

// corpusRows is the number of template rows: ~880 KiB of text, read in
// random order, so a 4 MiB frame holds each a few times (as a table holds
// similar rows) with different digits.
const corpusRows = 8192

// maxVary bounds the varying digits of a row: one 64-bit random number
// gives 16 of 4 bits.
const maxVary = 16

var (
	corpusOnce sync.Once
	corpus     []row
)

// rows returns the template rows, built on first use (they are the same
// for every seed: the seed picks the order and the digits).
func rows() []row {
	corpusOnce.Do(func() { corpus = buildCorpus(0x9e3779b97f4a7c15) })
	return corpus
}

var (
	statuses   = []string{"pending", "paid", "shipped", "delivered", "cancelled", "refunded"}
	currencies = []string{"EUR", "USD", "GBP", "CHF", "SEK", "JPY"}
	firstNames = []string{"anna", "ben", "carla", "david", "emma", "felix", "greta", "hugo", "ines", "jonas", "karin", "leon", "maria", "nils", "olga", "paul", "rosa", "sven", "tina", "ugo", "vera", "walter", "xenia", "yusuf", "zoe"}
	lastNames  = []string{"schmidt", "meyer", "weber", "wagner", "becker", "hoffmann", "koch", "richter", "klein", "wolf", "neumann", "schwarz", "braun", "zimmermann", "hartmann", "lange", "krause", "lehmann", "maier", "huber"}
	domains    = []string{"example.com", "mail.example.org", "shop.example.net", "corp.example.com", "post.example.de"}
	words      = strings.Fields(`order delivery customer package express standard return refund invoice
		warehouse north south east west central priority gift wrap fragile handle with care
		leave at door neighbour reception office signature required call before arrival
		discount voucher applied loyalty points member since newsletter opt in replacement
		item damaged missing size colour exchange requested backorder partial shipment
		tracking number carrier weekend morning afternoon evening pickup point locker
		invoice address differs company purchase order reference cost centre approved`)
)

// buildCorpus makes the template rows from a seed. Digits that vary per
// row are recorded by offset; the rest repeat as a table's columns do.
func buildCorpus(seed uint64) []row {
	x := seed
	next := func(n int) int {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int(x % uint64(n))
	}
	out := make([]row, corpusRows)
	var b []byte
	for i := range out {
		var vary []uint16
		b = b[:0]
		// digits appends n digits, of which the last v vary per row.
		digits := func(s string, v int) {
			for j := 0; j < len(s); j++ {
				if j >= len(s)-v {
					vary = append(vary, uint16(len(b)))
				}
				b = append(b, s[j])
			}
		}
		// id: a 7-digit serial, its last 3 digits vary.
		digits(strconv.Itoa(1000000+i*97), 3)
		b = append(b, '\t')
		// customer: 5 digits, the last 2 vary.
		digits(strconv.Itoa(10000+next(90000)), 2)
		b = append(b, '\t')
		// created_at: the last digits of the minutes and seconds vary.
		b = fmt.Appendf(b, "2024-%02d-%02d %02d:", 1+next(12), 1+next(28), next(24))
		digits(fmt.Sprintf("%02d", next(60)), 1)
		b = append(b, ':')
		digits(fmt.Sprintf("%02d", next(60)), 1)
		b = append(b, "+00\t"...)
		b = append(b, statuses[next(len(statuses))]...)
		b = append(b, '\t')
		// amount: the cents vary.
		digits(fmt.Sprintf("%d.%02d", 1+next(999), next(100)), 2)
		b = append(b, '\t')
		b = append(b, currencies[next(len(currencies))]...)
		b = append(b, '\t')
		b = fmt.Appendf(b, "%s.%s%d@%s\t", firstNames[next(len(firstNames))], lastNames[next(len(lastNames))], next(100), domains[next(len(domains))])
		// quantity: one varying digit.
		digits(strconv.Itoa(1+next(9)), 1)
		b = append(b, '\t')
		for w, n := 0, 3+next(8); w < n; w++ {
			if w > 0 {
				b = append(b, ' ')
			}
			b = append(b, words[next(len(words))]...)
		}
		b = append(b, '\n')
		if len(vary) > maxVary {
			vary = vary[:maxVary]
		}
		out[i] = row{text: append([]byte(nil), b...), vary: vary}
	}
	return out
}

// decimal maps 4 random bits to a digit (0-5 a little more often).
const decimal = "0123456789012345"

// Reader yields the bytes of one synthetic stream.
type Reader struct {
	rows    []row
	x       uint64 // xorshift state
	left    int64  // bytes still to yield
	pending []byte // the rest of a row cut by the last Read
	scratch []byte
}

// NewReader returns a reader of size bytes made from seed: the same seed and
// size give the same bytes, however they are read.
func NewReader(seed uint64, size int64) *Reader {
	r := &Reader{rows: rows(), x: seed*0x9e3779b97f4a7c15 | 1, left: size}
	for range 4 {
		r.rand()
	}
	return r
}

func (r *Reader) rand() uint64 {
	r.x ^= r.x << 13
	r.x ^= r.x >> 7
	r.x ^= r.x << 17
	return r.x
}

// fill writes the next row into dst (which has room for it) and returns its
// length.
func (r *Reader) fill(dst []byte, t *row, bits uint64) int {
	n := copy(dst, t.text)
	for _, off := range t.vary {
		dst[off] = decimal[bits&15]
		bits >>= 4
	}
	return n
}

// Read fills p; io.EOF after the stream's size.
func (r *Reader) Read(p []byte) (int, error) {
	if r.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.left {
		p = p[:r.left]
	}
	n := copy(p, r.pending)
	r.pending = r.pending[n:]
	for n < len(p) {
		a := r.rand()
		t := &r.rows[(a>>32)%corpusRows]
		bits := r.rand()
		if len(p)-n >= len(t.text) {
			n += r.fill(p[n:], t, bits)
			continue
		}
		if cap(r.scratch) < len(t.text) {
			r.scratch = make([]byte, 0, max(256, len(t.text)))
		}
		line := r.scratch[:len(t.text)]
		r.fill(line, t, bits)
		k := copy(p[n:], line)
		n += k
		r.pending = line[k:]
	}
	r.left -= int64(n)
	return n, nil
}
