package hugepage

import (
	"testing"
)

func TestAllocSizes(t *testing.T) {
	for _, n := range []int{0, 1, 4096, Size - 1, Size, Size + 1, 3*Size + 12345, 16 << 20} {
		b := Alloc(n)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Alloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		for i, c := range b {
			if c != 0 {
				t.Fatalf("Alloc(%d)[%d] = %d, want a zeroed buffer", n, i, c)
			}
		}
		for i := range b { // the whole buffer is usable
			b[i] = byte(i)
		}
	}
}
