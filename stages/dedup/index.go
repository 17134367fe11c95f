package dedup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
)

// DefaultIndexMemory is the index's memory when nothing says otherwise
// (a copy's).
const DefaultIndexMemory = 64 << 20

// EntryMemory is what the index keeps per chunk (its key, its location and
// the map's share), for the memory budget.
const EntryMemory = 200

// Index knows which chunks the store holds and where: those of earlier
// runs' lists, as many as its memory allows (the newest runs first), and
// those the run stores itself. A chunk it does not know is stored again:
// the index saves space and time, never decides what is right.
type Index struct {
	mu      sync.Mutex
	m       map[ID]*entry
	limit   int // entries
	left    int64
	pending int // entries being stored
}

type entry struct {
	ref  Ref
	done chan struct{} // closed when ref is set or err; nil once it is
	err  error
}

// NewIndex returns an empty index that keeps at most memory bytes of
// entries besides those being stored.
func NewIndex(memory int64) *Index {
	return &Index{m: map[ID]*entry{}, limit: int(max(memory/EntryMemory, 1))}
}

// Load adds the chunks of an earlier run's list, while there is room. It
// says how many of the list's chunks it left out for want of memory.
func (ix *Index) Load(r io.Reader) (left int64, err error) {
	l := NewListReader(r)
	for {
		ref, err := l.Next()
		if errors.Is(err, io.EOF) {
			return left, nil
		}
		if err != nil {
			return left, err
		}
		ix.mu.Lock()
		if _, ok := ix.m[ref.ID]; !ok {
			if len(ix.m)-ix.pending < ix.limit {
				ix.m[ref.ID] = &entry{ref: ref}
			} else {
				left++
				ix.left++
			}
		}
		ix.mu.Unlock()
	}
}

// LoadChecked is Load of a list whose manifest records digest
// ("sha256:<hex>"): its chunks are added only if its bytes have it, so a
// damaged or forged list is not trusted by the runs after it.
func (ix *Index) LoadChecked(r io.Reader, digest string) (left int64, err error) {
	h := sha256.New()
	l := NewListReader(io.TeeReader(r, h))
	var staged []Ref
	ix.mu.Lock()
	room := ix.limit - (len(ix.m) - ix.pending)
	ix.mu.Unlock()
	for {
		ref, err := l.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			// A list that does not read is most often one changed:
			// say so when its bytes show it, which tells more.
			if _, cerr := io.Copy(h, r); cerr == nil {
				if derr := sameDigest(h, digest); derr != nil {
					return 0, derr
				}
			}
			return 0, err
		}
		if len(staged) < room {
			staged = append(staged, ref)
		} else {
			left++
		}
	}
	if err := sameDigest(h, digest); err != nil {
		return 0, err
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	for _, ref := range staged {
		if _, ok := ix.m[ref.ID]; ok {
			continue
		}
		if len(ix.m)-ix.pending >= ix.limit {
			left++
			continue
		}
		ix.m[ref.ID] = &entry{ref: ref}
	}
	ix.left += left
	return left, nil
}

// Len is the number of chunks the index knows.
func (ix *Index) Len() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return len(ix.m) - ix.pending
}

// Left is the number of chunks Load left out for want of memory.
func (ix *Index) Left() int64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.left
}

// reserve returns the entry of the chunk id. fresh says nobody stores it
// yet: the caller does, and calls resolve.
func (ix *Index) reserve(id ID) (e *entry, fresh bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if e, ok := ix.m[id]; ok {
		return e, false
	}
	e = &entry{ref: Ref{ID: id}, done: make(chan struct{})}
	ix.m[id] = e
	ix.pending++
	return e, true
}

// resolve ends the storing of e, with its location or the error that
// kept it from the store. A chunk that could not be stored is forgotten,
// so that a later occurrence tries again; one stored beyond the index's
// memory is forgotten too.
func (ix *Index) resolve(e *entry, ref Ref, err error) {
	ix.mu.Lock()
	ix.pending--
	if err != nil || len(ix.m)-ix.pending > ix.limit {
		delete(ix.m, e.ref.ID)
	}
	ix.mu.Unlock()
	ref.ID = e.ref.ID
	e.ref, e.err = ref, err
	close(e.done)
}

// wait returns e's location once it is known.
func (e *entry) wait(ctx context.Context) (Ref, error) {
	if e.done == nil {
		return e.ref, nil
	}
	select {
	case <-e.done:
		return e.ref, e.err
	case <-ctx.Done():
		return Ref{}, context.Cause(ctx)
	}
}

// sameDigest says whether the list's bytes hashed into h have the digest
// its manifest records.
func sameDigest(h hash.Hash, digest string) error {
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != digest {
		return fmt.Errorf("the list's bytes have %s, its manifest records %s: the list is damaged or was changed", got, digest)
	}
	return nil
}
