package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
)

// genVersion names the generator's output: change it whenever the bytes
// the generator produces change, so stale cached data sets are not reused.
const genVersion = "v1"

// rng is a splitmix64 generator: fast, deterministic, good enough for
// synthetic text.
type rng struct{ s uint64 }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a number in [0, n).
func (r *rng) intn(n int) int { return int((r.next() >> 32) * uint64(n) >> 32) }

// pgDump produces the text of a PostgreSQL plain-format dump of one table
// (COPY rows: ids, words, sentences, numbers, timestamps, small JSON). The
// stream is a pure function of the seed: its first n bytes are the same
// whatever n is asked for later.
//
// It is not package synthetic's generator (`pipe bench --synthetic`), on
// purpose. This one is the comparison harness's fixed data set: its bytes
// are frozen under genVersion, so results of different commits (and the
// cached files under bench/results/data) compare; its free text of words
// drawn one by one compresses less (zstd -3: 2.8x on 256 MiB) and it makes
// ~350 MB/s. synthetic's pastes template rows and changes a dozen digits
// each: ~2 GB/s, so that it is never what a tuning run measures, and 4.0x.
// Feeding the harness synthetic's data would change every number the
// reports have recorded; do it with a new genVersion and a fresh run.
type pgDump struct {
	r     rng
	words [][]byte
	id    int64
	ts    int64 // seconds since 2020-01-01
}

const dumpHeader = `--
-- PostgreSQL database dump
--

-- Dumped from database version 16.4
-- Dumped by pg_dump version 16.4

SET statement_timeout = 0;
SET lock_timeout = 0;
SET client_encoding = 'UTF8';
SET standard_conforming_strings = on;

--
-- Data for Name: events; Type: TABLE DATA; Schema: public; Owner: app
--

COPY public.events (id, account_id, created_at, kind, title, body, amount, quantity, country, payload) FROM stdin;
`

var (
	kinds     = []string{"order.created", "order.paid", "order.shipped", "order.refunded", "user.login", "user.logout", "user.signup", "cart.updated", "invoice.sent", "review.posted"}
	countries = []string{"DE", "FR", "US", "GB", "NL", "SE", "PL", "ES", "IT", "JP", "BR", "CA", "IN", "AU"}
	devices   = []string{"ios", "android", "web", "desktop", "api"}
)

func newPGDump(seed uint64) *pgDump {
	g := &pgDump{r: rng{s: seed}, ts: 0}
	// A vocabulary of pronounceable words built from syllables.
	syl := []string{"ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "be", "da", "fi", "go", "ha", "ju", "pe", "qu", "re", "si", "to", "wu", "an", "el", "or", "us", "ing", "er", "th", "st", "ch", "ou"}
	seen := map[string]bool{}
	for len(g.words) < 8192 {
		n := 1 + g.r.intn(4)
		w := ""
		for range n {
			w += syl[g.r.intn(len(syl))]
		}
		if !seen[w] {
			seen[w] = true
			g.words = append(g.words, []byte(w))
		}
	}
	return g
}

// word picks a word, skewed toward the front of the vocabulary the way
// real text favours common words.
func (g *pgDump) word() []byte {
	v := g.r.next()
	n := uint64(len(g.words))
	x := (v & 0xffffffff) * n >> 32
	y := (v >> 32) * n >> 32
	return g.words[min(x, y)]
}

func (g *pgDump) appendSentence(b []byte, n int) []byte {
	for i := range n {
		if i > 0 {
			b = append(b, ' ')
		}
		w := g.word()
		if i == 0 {
			b = append(b, w[0]-'a'+'A')
			b = append(b, w[1:]...)
		} else {
			b = append(b, w...)
		}
	}
	return append(b, '.')
}

func appendPad(b []byte, v int64, width int) []byte {
	var tmp [20]byte
	s := strconv.AppendInt(tmp[:0], v, 10)
	for i := len(s); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// appendTimestamp writes 2020-01-01 + sec (a simple 30-day month calendar
// is fine for synthetic data) with microseconds.
func appendTimestamp(b []byte, sec int64, usec int) []byte {
	days := sec / 86400
	rest := sec % 86400
	year := 2020 + days/360
	month := (days%360)/30 + 1
	day := days%30 + 1
	b = appendPad(b, year, 4)
	b = append(b, '-')
	b = appendPad(b, month, 2)
	b = append(b, '-')
	b = appendPad(b, day, 2)
	b = append(b, ' ')
	b = appendPad(b, rest/3600, 2)
	b = append(b, ':')
	b = appendPad(b, rest/60%60, 2)
	b = append(b, ':')
	b = appendPad(b, rest%60, 2)
	b = append(b, '.')
	b = appendPad(b, int64(usec), 6)
	return append(b, "+00"...)
}

// appendRow appends one COPY row.
func (g *pgDump) appendRow(b []byte) []byte {
	r := &g.r
	g.id++
	g.ts += int64(r.intn(4))
	b = strconv.AppendInt(b, g.id, 10)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(1000+r.intn(200000)), 10)
	b = append(b, '\t')
	b = appendTimestamp(b, g.ts, r.intn(1000000))
	b = append(b, '\t')
	b = append(b, kinds[r.intn(len(kinds))]...)
	b = append(b, '\t')
	b = g.appendSentence(b, 2+r.intn(5))
	b = append(b, '\t')
	if r.intn(10) == 0 {
		b = append(b, `\N`...)
	} else {
		for i, n := 0, 1+r.intn(3); i < n; i++ {
			if i > 0 {
				b = append(b, ' ')
			}
			b = g.appendSentence(b, 5+r.intn(12))
		}
	}
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(r.intn(100000)), 10)
	b = append(b, '.')
	b = appendPad(b, int64(r.intn(100)), 2)
	b = append(b, '\t')
	b = strconv.AppendInt(b, int64(1+r.intn(50)), 10)
	b = append(b, '\t')
	b = append(b, countries[r.intn(len(countries))]...)
	b = append(b, '\t')
	b = append(b, `{"device": "`...)
	b = append(b, devices[r.intn(len(devices))]...)
	b = append(b, `", "ip": "10.`...)
	b = strconv.AppendInt(b, int64(r.intn(256)), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(r.intn(256)), 10)
	b = append(b, '.')
	b = strconv.AppendInt(b, int64(r.intn(256)), 10)
	b = append(b, `", "score": 0.`...)
	b = appendPad(b, int64(r.intn(10000)), 4)
	b = append(b, `, "tags": ["`...)
	b = append(b, g.word()...)
	b = append(b, `", "`...)
	b = append(b, g.word()...)
	b = append(b, `"], "session": "`...)
	b = strconv.AppendUint(b, r.next()>>16, 16)
	b = append(b, `"}`...)
	return append(b, '\n')
}

// WriteTo writes exactly n bytes of the dump to w.
func (g *pgDump) writeN(w io.Writer, n int64) error {
	buf := make([]byte, 0, 1<<20)
	buf = append(buf, dumpHeader...)
	for n > 0 {
		for len(buf) < cap(buf)-4096 {
			buf = g.appendRow(buf)
		}
		k := min(int64(len(buf)), n)
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		n -= k
		buf = buf[:0]
	}
	return nil
}

// dataSeed fixes the data set; with genVersion it names the cache files.
const dataSeed = 20261121

// genMain is the hidden `gen -bytes N` mode: the dump on stdout, for the
// exec source of the memory benchmark.
func genMain(args []string) error {
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	n := fs.Int64("bytes", 1<<30, "bytes to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w := bufio.NewWriterSize(os.Stdout, 1<<20)
	if err := newPGDump(dataSeed).writeN(w, *n); err != nil {
		return err
	}
	return w.Flush()
}

// ensureData returns the path of the n-byte data set under dir, generating
// it (to a temporary name, renamed when complete) unless it is cached.
func ensureData(dir string, n int64, logf func(string, ...any)) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("pgdump-%s-%d.sql", genVersion, n))
	if fi, err := os.Stat(path); err == nil && fi.Size() == n {
		logf("using cached data set %s", path)
		return path, nil
	} else if err == nil {
		return "", fmt.Errorf("%s has %d bytes, want %d; delete it", path, fi.Size(), n)
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	logf("generating %s (%s)", path, mb(n))
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = newPGDump(dataSeed).writeN(w, n)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return path, nil
}
