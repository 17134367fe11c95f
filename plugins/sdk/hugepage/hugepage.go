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
// The buffers stay ordinary Go memory, collected like any other; only the
// part of a buffer made of whole, aligned huge pages is advised. Elsewhere
// than Linux, and for buffers smaller than a huge page, Alloc is make.
package hugepage

// Size is the huge page size Alloc aligns to (x86-64's and arm64's 2 MiB).
const Size = 2 << 20

// Alloc returns a zeroed buffer of length and capacity n.
func Alloc(n int) []byte {
	b := make([]byte, n)
	if n >= Size {
		advise(b)
	}
	return b
}
