package hugepage

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// TestAdvised proves the advice reached the kernel: the aligned interior of
// a large buffer is in a mapping whose flags carry "hg" (MADV_HUGEPAGE),
// the buffer's unaligned head is not, and once the buffer is collected its
// interior is advised back ("nh", MADV_NOHUGEPAGE).
func TestAdvised(t *testing.T) {
	mode, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		t.Skipf("this kernel has no transparent huge pages: %v", err)
	}
	t.Logf("transparent huge pages: %s", strings.TrimSpace(string(mode)))
	b := Alloc(8 << 20)
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	interior := (p + Size - 1) &^ (Size - 1)
	if flags(t, interior) != "hg" || flags(t, interior+Size) != "hg" {
		t.Errorf("the aligned interior of an 8 MiB buffer at %#x is not advised for huge pages", p)
	}
	if p < interior && flags(t, p) == "hg" {
		t.Errorf("the unaligned head of the buffer at %#x is advised too", p)
	}
	runtime.KeepAlive(b) // b is unreachable from here on
	deadline := time.Now().Add(5 * time.Second)
	for flags(t, interior) != "nh" {
		if time.Now().After(deadline) {
			t.Fatalf("the interior of a collected buffer at %#x is still %q, want the advice taken back", interior, flags(t, interior))
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}

// flags returns "hg" or "nh" when the mapping holding addr is advised for
// or against huge pages, else "".
func flags(t *testing.T, addr uintptr) string {
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
			for _, fl := range strings.Fields(line)[1:] {
				if fl == "hg" || fl == "nh" {
					return fl
				}
			}
			return ""
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	t.Fatalf("no mapping holds %#x", addr)
	return ""
}
