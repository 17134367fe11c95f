package hugepage

import (
	"runtime"
	"syscall"
	"unsafe"
)

// advise asks for huge pages for the aligned interior of b, and for their
// end when b is collected. It is only a hint: a kernel without transparent
// huge pages, or with them disabled, says no, and b keeps its small pages.
// Memory Go reuses comes zeroed by Go, so already touched, and keeps its
// small pages until khugepaged collapses it.
func advise(b []byte) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := (p + Size - 1) &^ (Size - 1)
	end := (p + uintptr(len(b))) &^ (Size - 1)
	if end <= start {
		return
	}
	if syscall.Madvise(b[start-p:end-p], syscall.MADV_HUGEPAGE) != nil {
		return
	}
	// The range, by address only: the cleanup must not keep b alive. It
	// may run after Go reused the memory, even for a new buffer advised
	// again; the worst that does is small pages for that buffer.
	runtime.AddCleanup(unsafe.SliceData(b), unadvise, span{start, end - start})
}

type span struct{ start, n uintptr }

func unadvise(s span) {
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, s.start, s.n, syscall.MADV_NOHUGEPAGE)
}
