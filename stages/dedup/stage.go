package dedup

import (
	"context"
	"errors"
	"io"
	"strings"
)

// ListExt ends the name of a stream's object in a deduplicated run: its
// chunk list.
const ListExt = ".chunks"

// lineMax bounds a list line: two digests, a pack name and four numbers.
const lineMax = 64 + 1 + 10 + 1 + 200 + 1 + 20 + 1 + 20 + 1 + 64 + 1

// MaxListSize bounds the list of a stream of n bytes cut into chunks of
// at least s.Min bytes.
func MaxListSize(n int64, s Sizes) int64 {
	if n < 0 {
		return -1
	}
	return int64(len(ListHeader)+1+64) + (n/int64(max(s.Min, 1))+1)*lineMax
}

// Unbound is the dedup stage's processor until a run binds the stage to
// its store (a plan's stage, for the memory budget).
type Unbound struct{}

// Stream fails: a run replaces Unbound before any stream moves.
func (Unbound) Stream(context.Context, io.Writer, io.Reader) error {
	return errors.New("the dedup stage was not bound to a store")
}

// String says how a chunk is sealed, for plans.
func (f Format) String() string {
	var parts []string
	if f.Codec != nil {
		parts = append(parts, "compressed with "+f.Codec.Name)
	} else {
		parts = append(parts, "stored uncompressed")
	}
	switch n := len(f.Keys.Fingerprints); {
	case n > 0:
		parts = append(parts, "encrypted to "+strings.Join(f.Keys.Fingerprints, ", "))
	default:
		parts = append(parts, "not encrypted")
	}
	return strings.Join(parts, ", ")
}
