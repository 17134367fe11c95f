// Package hugepage allocates the large buffers bulk data moves through
// (chunks, upload parts, download ranges) so that the kernel may back them
// with transparent huge pages.
//
// A buffer's memory is faulted in on first touch. With 4 KiB pages a
// 64 MiB buffer takes 16,384 page faults, which costs tens of milliseconds
// (more in a virtual machine); with 2 MiB pages it takes 32. Linux's
// default transparent huge page mode, "madvise", gives huge pages only to
// memory that asks for them, and Go's heap does not ask. A short process —
// archive_command uploading one WAL segment — pays for every byte of its
// buffers this way, and a long one pays once per buffer.
//
// The buffers stay ordinary Go memory; only the part of a buffer made of
// whole, aligned huge pages is advised. The advice belongs to the
// addresses, not to the buffer: once the buffer is collected, Go reuses the
// memory for other objects, and khugepaged could fill a mostly free 2 MiB
// range back to a whole huge page, holding memory the collector returned
// (why Go stopped advising its own heap, golang/go#64332). So when a buffer
// is collected, its range is advised back (MADV_NOHUGEPAGE): huge pages
// last as long as the buffer. Elsewhere than Linux, and for buffers smaller
// than a huge page, Alloc is make.
package hugepage

// Size is the huge page size Alloc aligns to: x86-64's, and arm64's with
// 4 KiB base pages (with 64 KiB base pages arm64's are 512 MiB, and no
// buffer holds a whole one).
const Size = 2 << 20

// Alloc returns a zeroed buffer of length and capacity n.
func Alloc(n int) []byte {
	b := make([]byte, n)
	if n >= Size {
		advise(b)
	}
	return b
}
