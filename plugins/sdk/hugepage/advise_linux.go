package hugepage

import (
	"syscall"
	"unsafe"
)

// advise asks for huge pages for the aligned interior of b, before any of
// it was touched. It is only a hint: a kernel without transparent huge
// pages, or with them disabled, says no, and b keeps its small pages.
func advise(b []byte) {
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	start := (p + Size - 1) &^ (Size - 1)
	end := (p + uintptr(len(b))) &^ (Size - 1)
	if end > start {
		_ = syscall.Madvise(b[start-p:end-p], syscall.MADV_HUGEPAGE)
	}
}
