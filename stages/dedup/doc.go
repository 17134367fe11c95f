// Package dedup stores streams as content-defined chunks, each chunk once
// per store, and reads them back.
//
// A stream is cut where its content says (FastCDC with a gear table drawn
// from the store's secret, chunks of 256 KiB to 4 MiB, 1 MiB on average),
// so an insertion moves the boundaries near it only. The stream's own
// goroutine only cuts, while another reads ahead; workers shared by the
// run's streams name, look up and store the chunks. A chunk is named by its
// ID, the keyed BLAKE3 hash of its bytes under the same secret: whoever can list
// the store cannot test whether it holds content they guess. A chunk the
// store holds already is referred to, not stored again; a new one is
// compressed (one zstd frame) and encrypted (one age file) on its own, and
// the resulting blob appended to a pack, an object of many blobs (16 MiB by
// default) shared by the streams of a run.
//
// What a run stores for a stream is its chunk list, a text object:
//
//	pipe-chunks/v1
//	<id> <plain size> <pack> <offset> <stored size> <sha256 of the blob>
//	…
//	end <chunks> <plain bytes>
//
// one line per chunk in the stream's order, the same chunk as often as it
// occurs. The list names where every chunk lies, so each run is complete
// on its own: deleting one never touches another's list, and the packs no
// kept run's list names are garbage. Without pipe, a stream is
// `tail -c +$((offset+1)) pack | head -c size | age -d -i KEY | zstd -d`
// for each line, in order (docs/restore-without-pipe.md).
//
// Lists are kept in clear: the backup side, which holds only the
// recipients' public keys, reads the newest runs' lists to know which
// chunks the store holds (Index, bounded in memory). They reveal the
// number and sizes of chunks, never their content; the manifest records
// each list's SHA-256, and each line the blob's, so a signed manifest
// authenticates every byte a restore reads.
package dedup
