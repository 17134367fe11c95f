package wal

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"os"

	"github.com/zeebo/xxh3"
)

// An object's name carries two digests. The object's is SHA-256 of the
// stored bytes, as pipe verify checks a backup's objects: it is what
// detects a damaged object without a key. The file's, XXH3-128 of the WAL
// file (32 hex digits), identifies the content: a push of the same file
// again finds it archived, other content under the name is refused, and
// a fetch checks that what it decoded is what was pushed. Nothing rests
// on it being hard to forge: whoever can write the store can write any
// name, and only an encrypted archive (age authenticates every byte)
// resists that. It is computed over every byte archived and fetched, and
// XXH3 does that in 0.6-0.9 ms for a 16 MiB segment just read, where
// SHA-256 (the CPU's SHA extensions) took 9.3 ms and BLAKE3 4-8 ms: the
// largest cost of the background pusher after zstd. Objects archived
// before carry the file's SHA-256 (64 hex digits) and are checked with it:
// a push compares a file with an archived one in the archived one's
// digest, and a fetch checks what it decoded with the object's.

// isSHA256 reports whether a file digest is SHA-256 (of an object pipe
// archived before XXH3).
func isSHA256(sum string) bool { return len(sum) == 2*sha256.Size }

// fileHasher hashes a file as the file digest like sum was made.
type fileHasher interface {
	io.Writer
	digest() string
}

type sha256Hasher struct{ hash.Hash }

func (h sha256Hasher) digest() string { return hex.EncodeToString(h.Sum(nil)) }

type xxh3Hasher struct{ *xxh3.Hasher }

func (h xxh3Hasher) digest() string {
	s := h.Sum128().Bytes()
	return hex.EncodeToString(s[:])
}

func newFileHasher(like string) fileHasher {
	if isSHA256(like) {
		return sha256Hasher{sha256.New()}
	}
	return xxh3Hasher{xxh3.New()}
}

// fileIs reports whether the file at p is the one whose file digest is
// sum, in sum's hash.
func fileIs(p, sum string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	got, err := digestAt(f, fi.Size(), sum)
	return err == nil && got == sum
}
