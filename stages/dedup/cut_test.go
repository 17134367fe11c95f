package dedup

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"
)

// pgbenchRows is n rows as pg_dump writes pgbench_accounts: few
// boundaries, so most bytes are rolled over.
func pgbenchRows(n int) []byte {
	var b strings.Builder
	fill := strings.Repeat(" ", 84)
	for aid := 1; aid <= n; aid++ {
		fmt.Fprintf(&b, "%d\t%d\t0\t%s\n", aid, (aid-1)/100000+1, fill)
	}
	return []byte(b.String())
}

// rollByte is roll as its definition says: the hash over one byte at a
// time.
func rollByte(d []byte, from int, fp uint64, g *[256]uint64, mask uint64) (int, uint64, bool) {
	for i := from; i < len(d); i++ {
		if fp = fp<<1 + g[d[i]]; fp&mask == 0 {
			return i, fp, true
		}
	}
	return 0, fp, false
}

// roll finds the boundaries, and ends with the hash, that rolling one
// byte at a time does, from every offset within its step.
func TestRollIsByteByByte(t *testing.T) {
	c := newCutter(testKey(t), Sizes{Min: 1 << 10, Avg: 4 << 10, Max: 16 << 10})
	data := append(randomBytes(2, 2<<20), pgbenchRows(20000)...)
	for _, mask := range []uint64{c.maskS, c.maskL, 0} {
		for from := range 9 {
			d, fp, cuts := data, uint64(0), 0
			for len(d) > from {
				i, f, ok := roll(d, from, fp, &c.gear, mask)
				wi, wf, wok := rollByte(d, from, fp, &c.gear, mask)
				if i != wi || f != wf || ok != wok {
					t.Fatalf("mask %x, from %d, after %d cuts: roll = %d, %x, %v; byte by byte %d, %x, %v", mask, from, cuts, i, f, ok, wi, wf, wok)
				}
				if !ok {
					break
				}
				cuts++
				fp, d = f, d[i+1:]
			}
			if mask != 0 && cuts < 100 {
				t.Fatalf("mask %x, from %d: %d cuts, too few to test", mask, from, cuts)
			}
		}
	}
}

// BenchmarkCut is the cutter alone over data held in memory, at the
// default sizes.
func BenchmarkCut(b *testing.B) {
	c := newCutter(testKey(b), DefaultSizes)
	for _, in := range []struct {
		name string
		data []byte
	}{
		{"random", randomBytes(1, 64<<20)},
		{"pgbench", pgbenchRows(700000)},
	} {
		b.Run(in.name, func(b *testing.B) {
			b.SetBytes(int64(len(in.data)))
			for b.Loop() {
				for d := in.data; len(d) > 0; {
					d = d[c.cut(d):]
				}
			}
		})
	}
}

// No key lets a boundary fall deep inside a run of one byte (the spaces
// that pad every pgbench row, a page's zeroed free space): the chunks of
// such data are cut alike, and as long, whatever the key.
func TestNoCutInsideRuns(t *testing.T) {
	s := Sizes{Min: 1 << 10, Avg: 4 << 10, Max: 64 << 10}
	data := pgbenchRows(30000)
	for i := range 40 { // and runs of zeros, 8 KiB each
		at := i * len(data) / 40
		copy(data[at:], make([]byte, 8<<10))
	}
	for range 20 {
		c := newCutter(testKey(t), s)
		deepest := max(bits.TrailingZeros64(c.maskS), bits.TrailingZeros64(c.maskL))
		cuts := 0
		for off := 0; len(data)-off > s.Max; {
			n := c.cut(data[off:])
			end := off + n // the hash with a mask's bits clear is the one at data[end]
			if n < s.Max {
				cuts++
				run := 1
				for run <= n && data[end-run] == data[end] {
					run++
				}
				if run > deepest {
					t.Fatalf("a boundary %d bytes into a run of %q (deepest allowed %d)", run, data[end], deepest)
				}
			}
			off = end
		}
		if cuts < 100 {
			t.Fatalf("%d boundaries in %d bytes: too few to test", cuts, len(data))
		}
	}
}
