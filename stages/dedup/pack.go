package dedup

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// PackExt ends a pack's name.
const PackExt = ".pack"

// DefaultPackSize is the size a pack is closed at: few requests per run
// (a terabyte in 65536), and a small loss when a run fails part way.
const DefaultPackSize = 16 << 20

// Packs is where a run writes its packs: the store's chunk folder.
type Packs interface {
	// Create starts the pack called name. Nothing is visible at it until
	// Commit succeeds.
	Create(ctx context.Context, name string) (sdk.ObjectWriter, error)
}

// Packer appends blobs to packs, one open at a time, shared by the
// streams of a run. Its packs are named <prefix>-<n>.pack.
type Packer struct {
	packs  Packs
	prefix string
	size   int64

	mu      sync.Mutex
	n       int
	cur     sdk.ObjectWriter
	name    string
	written int64
	done    []string
	err     error // sticky: a pack that failed fails every blob after
}

// NewPacker returns a packer of packs of about size bytes (0: the
// default) named after prefix (a run's id).
func NewPacker(packs Packs, prefix string, size int64) *Packer {
	if size <= 0 {
		size = DefaultPackSize
	}
	return &Packer{packs: packs, prefix: prefix, size: size}
}

// Add appends blob, whose SHA-256 is sum, to the open pack, and says
// where it lies. A pack that reaches its size is committed.
func (p *Packer) Add(ctx context.Context, blob []byte, sum [32]byte) (Loc, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return Loc{}, p.err
	}
	if p.cur == nil {
		p.n++
		name := fmt.Sprintf("%s-%05d%s", p.prefix, p.n, PackExt)
		w, err := p.packs.Create(ctx, name)
		if err != nil {
			p.err = fmt.Errorf("pack %s: %w", name, err)
			return Loc{}, p.err
		}
		p.cur, p.name, p.written = w, name, 0
	}
	loc := Loc{Pack: p.name, Offset: p.written, Size: int64(len(blob)), Sum: sum}
	if _, err := p.cur.Write(blob); err != nil {
		p.err = fmt.Errorf("pack %s: writing: %w", p.name, err)
		p.abort(ctx)
		return Loc{}, p.err
	}
	p.written += int64(len(blob))
	if p.written >= p.size {
		if err := p.commit(ctx); err != nil {
			return Loc{}, err
		}
	}
	return loc, nil
}

// commit commits the open pack; p.mu is held.
func (p *Packer) commit(ctx context.Context) error {
	if p.cur == nil {
		return nil
	}
	if err := p.cur.Commit(ctx); err != nil {
		p.err = fmt.Errorf("pack %s: committing: %w", p.name, err)
		p.abort(ctx)
		return p.err
	}
	p.done = append(p.done, p.name)
	p.cur = nil
	return nil
}

func (p *Packer) abort(ctx context.Context) {
	if p.cur != nil {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = p.cur.Abort(ctx)
		p.cur = nil
	}
}

// Close commits the open pack: after it, every location Add returned is
// in the store. It returns the names of the packs committed.
func (p *Packer) Close(ctx context.Context) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil {
		return p.done, p.err
	}
	err := p.commit(ctx)
	return p.done, err
}

// Abort discards the open pack. Committed packs stay: no run names them,
// and prune removes them.
func (p *Packer) Abort(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.abort(ctx)
	if p.err == nil {
		p.err = fmt.Errorf("the run's packs were aborted")
	}
}

// packSet is the packs a run's lists name, added to by several streams.
type packSet struct {
	mu sync.Mutex
	m  map[string]bool
}

func (p *packSet) add(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]bool{}
	}
	p.m[name] = true
}

// list returns the packs, in no order.
func (p *packSet) list() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.m))
	for name := range p.m {
		out = append(out, name)
	}
	return out
}
