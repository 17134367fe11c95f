package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// IndexName is the index's base name at the root of a store of runs.
const IndexName = sdk.IndexName

// IndexFormat identifies this version of the index.
const IndexFormat = "pipe-index/v1"

// maxIndexSize bounds the index a listing reads.
const maxIndexSize = 64 << 20

// Summary is what a listing shows of a run: its manifest without the
// list of objects.
type Summary struct {
	RunID      string    `json:"run_id"`
	Pipeline   string    `json:"pipeline"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	CopiedAt   time.Time `json:"copied_at,omitzero"`
	Streams    int       `json:"streams"`
	// Failed names the streams of a partial run (a cluster's databases
	// that failed while the others were stored).
	Failed []string `json:"failed_streams,omitempty"`
	// Damage is what the source found damaged (see manifest.Damage).
	Damage string `json:"damage,omitempty"`
	// Stored is the bytes the objects take; Original what they hold
	// decoded, or -1 when not recorded.
	Stored     int64             `json:"stored_bytes"`
	Original   int64             `json:"original_bytes"`
	Codec      string            `json:"codec"`
	Encryption string            `json:"encryption,omitempty"`
	Recipients []string          `json:"recipients,omitempty"`
	Passphrase bool              `json:"passphrase,omitempty"`
	Source     map[string]string `json:"source,omitempty"`
}

// Summarize sums up a manifest.
func Summarize(m *manifest.Manifest) Summary {
	s := Summary{RunID: m.RunID, Pipeline: m.Pipeline, StartedAt: m.StartedAt, FinishedAt: m.FinishedAt, CopiedAt: m.CopiedAt,
		Streams: len(m.Objects), Source: m.Source, Passphrase: m.RunKey != nil, Damage: m.Damage}
	for _, f := range m.Failed {
		s.Failed = append(s.Failed, f.Stream)
	}
	codecs, recips := map[string]bool{}, map[string]bool{}
	for _, o := range m.Objects {
		s.Stored += o.Size
		if o.OriginalSize < 0 || s.Original < 0 {
			s.Original = -1
		} else {
			s.Original += o.OriginalSize
		}
		codecs[o.Codec] = true
		if o.Encryption != "" {
			s.Encryption = o.Encryption
		}
		for _, r := range o.Recipients {
			recips[r] = true
		}
	}
	if m.RunKey != nil {
		s.Stored += m.RunKey.Size
	}
	if d := m.Dedup; d != nil {
		// The lists, and what the run added to the packs; how its chunks
		// are sealed.
		s.Stored += d.StoredBytes
		codecs = map[string]bool{"dedup+" + d.Codec: true}
		s.Encryption = d.Encryption
		for _, r := range d.Recipients {
			recips[r] = true
		}
	}
	s.Codec = strings.Join(slices.Sorted(maps.Keys(codecs)), ",")
	s.Recipients = slices.Sorted(maps.Keys(recips))
	if s.Passphrase || (len(s.Recipients) == 1 && s.Recipients[0] == "scrypt") {
		s.Passphrase, s.Recipients = true, nil
	}
	return s
}

// Entry is one run as the index (or a listing) knows it.
type Entry struct {
	// Manifest is the manifest's key, relative to the store's root;
	// ManifestSize its size, which a listing checks the index against.
	Manifest     string `json:"manifest"`
	ManifestSize int64  `json:"manifest_size"`
	Summary
	// Outside are the run's objects that are not in its manifest's folder
	// (a template's layout); the objects in that folder are the run's.
	Outside []string `json:"outside,omitempty"`
	// Pinned is whether the run has a pin (PinKey): a listing sets it
	// from the store's objects, whatever the index says.
	Pinned bool `json:"pinned,omitempty"`
}

// NewEntry makes a run's entry from its manifest.
func NewEntry(key string, size int64, m *manifest.Manifest) Entry {
	e := Entry{Manifest: key, ManifestSize: size, Summary: Summarize(m)}
	r := &Run{Key: key, Manifest: m}
	dir := folder(key)
	for _, k := range r.Keys() {
		if !strings.HasPrefix(k, dir) {
			e.Outside = append(e.Outside, k)
		}
	}
	return e
}

// folder is the folder part of key with its "/", or "".
func folder(key string) string {
	if d := path.Dir(key); d != "." {
		return d + "/"
	}
	return ""
}

// Index is the cache a store of runs keeps of its runs, so a listing reads
// one object instead of every manifest. The manifests stay the truth: a
// listing uses an entry only if its manifest is there, as large as the
// entry says, and reads every manifest the index lacks; a lost or stale
// index costs speed only.
type Index struct {
	Format string  `json:"format"`
	Runs   []Entry `json:"runs"`
}

// readIndex reads the index at key, nil when there is none or it cannot
// be used.
func readIndex(ctx context.Context, st Store, key string) *Index {
	rc, err := st.Open(ctx, key)
	if err != nil {
		return nil
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxIndexSize+1))
	if err != nil || len(b) > maxIndexSize {
		return nil
	}
	var ix Index
	if json.Unmarshal(b, &ix) != nil || ix.Format != IndexFormat {
		return nil
	}
	return &ix
}

// Marshal encodes the index.
func (ix *Index) Marshal() ([]byte, error) {
	ix.Format = IndexFormat
	sort.Slice(ix.Runs, func(i, j int) bool { return ix.Runs[i].Manifest < ix.Runs[j].Manifest })
	return json.Marshal(ix)
}

// Listing is a store's runs as a listing shows them.
type Listing struct {
	// Runs are the complete runs, newest (by finish time) first.
	Runs []Entry
	// Incomplete are objects of no run, as in Catalog.
	Incomplete []*Incomplete
	// Invalid are manifests that were refused.
	Invalid []Invalid
	// FromIndex counts the runs the index told of; Read the manifests read.
	FromIndex, Read int
	// Stale is set when the index missed runs or named ones that are gone:
	// writing Index() back makes the next listing fast.
	Stale bool
}

// Index returns an index of the listing's runs.
func (l *Listing) Index() *Index { return &Index{Runs: l.Runs} }

// List lists the runs of a store, through its index where it is good.
func List(ctx context.Context, st Store) (*Listing, error) {
	objs, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for _, o := range objs {
		sizes[o.Key] = o.Size
	}
	l := &Listing{}
	known := l.indexedRuns(ctx, st, sizes)
	var toRead []string
	for _, o := range objs {
		if !manifest.IsKey(o.Key) {
			continue
		}
		if e, ok := known[o.Key]; ok {
			l.Runs = append(l.Runs, e)
			l.FromIndex++
			continue
		}
		toRead = append(toRead, o.Key)
	}
	if len(toRead) > 0 {
		l.Stale = true
	}
	entries, errs := readEntries(ctx, st, toRead, sizes)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.addRead(toRead, entries, errs)
	for i := range l.Runs {
		_, l.Runs[i].Pinned = sizes[PinKey(l.Runs[i].Manifest)]
	}
	sort.SliceStable(l.Runs, func(i, j int) bool {
		a, b := l.Runs[i], l.Runs[j]
		if !a.FinishedAt.Equal(b.FinishedAt) {
			return a.FinishedAt.After(b.FinishedAt)
		}
		return a.Manifest > b.Manifest
	})
	l.Incomplete = leftovers(objs, l.Runs, l.Invalid)
	return l, nil
}

// indexedRuns returns the runs of the store's index that still hold, by
// manifest key: the manifest is there, at the size the index says. It
// marks the listing stale when there is no index, it cannot be read, or
// it names a run that no longer holds.
func (l *Listing) indexedRuns(ctx context.Context, st Store, sizes map[string]int64) map[string]Entry {
	known := map[string]Entry{}
	if _, ok := sizes[IndexName]; ok {
		if ix := readIndex(ctx, st, IndexName); ix != nil {
			for _, e := range ix.Runs {
				if sz, ok := sizes[e.Manifest]; ok && sz == e.ManifestSize && manifest.IsKey(e.Manifest) {
					known[e.Manifest] = e
				} else {
					l.Stale = true
				}
			}
		} else {
			l.Stale = true
		}
	} else {
		l.Stale = true
	}
	return known
}

// readEntries reads and checks the manifests keys, readers at once: the
// entry of keys[i], or why it could not be read, is at i.
func readEntries(ctx context.Context, st Store, keys []string, sizes map[string]int64) ([]*Entry, []error) {
	entries := make([]*Entry, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	sem := make(chan struct{}, readers)
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			m, err := ReadManifest(ctx, st, k)
			if err == nil {
				err = (&Run{Key: k, Manifest: m}).inside()
			}
			if err != nil {
				errs[i] = err
				return
			}
			e := NewEntry(k, sizes[k], m)
			entries[i] = &e
		}()
	}
	wg.Wait()
	return entries, errs
}

// addRead adds what readEntries read of the manifests keys: a run, or a
// refused manifest unless it was deleted while the store was listed.
func (l *Listing) addRead(keys []string, entries []*Entry, errs []error) {
	for i, k := range keys {
		if errs[i] != nil {
			if errors.Is(errs[i], sdk.ErrNotFound) {
				continue // deleted while we listed
			}
			l.Invalid = append(l.Invalid, Invalid{Key: k, Err: errs[i]})
			continue
		}
		l.Runs = append(l.Runs, *entries[i])
		l.Read++
	}
}

// leftovers groups the objects that belong to no run (nor to a refused
// manifest's folder) by run id.
func leftovers(objs []sdk.ObjectInfo, runs []Entry, invalid []Invalid) []*Incomplete {
	var dirs []string
	named := map[string]bool{IndexName: true}
	for _, e := range runs {
		named[e.Manifest] = true
		named[PinKey(e.Manifest)] = true
		// A manifest at the root (the store is one run's folder) covers
		// everything in it.
		dirs = append(dirs, folder(e.Manifest))
		for _, k := range e.Outside {
			named[k] = true
		}
	}
	for _, inv := range invalid {
		named[inv.Key] = true
	}
	groups := map[string]*Incomplete{}
	var out []*Incomplete
	for _, o := range objs {
		if named[o.Key] || inFolders(o.Key, dirs) || manifest.InPacks(o.Key) {
			continue
		}
		id, t, _ := RunTime(o.Key)
		g := groups[id]
		if g == nil {
			g = &Incomplete{RunID: id, Started: t}
			groups[id] = g
			out = append(out, g)
		}
		g.Objects = append(g.Objects, o)
		g.Size += o.Size
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.RunID == "") != (b.RunID == "") {
			return b.RunID == ""
		}
		return a.RunID > b.RunID
	})
	return out
}

func inFolders(key string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(key, d) {
			return true
		}
	}
	return false
}

// Writer is a store pipe can write to: a storage sink's view.
type Writer interface {
	Store
	// Put replaces the object at key with b.
	Put(ctx context.Context, key string, b []byte) error
	Remove(ctx context.Context, key string) error
}

// UpdateIndex adds entries to the store's index and drops the entries of
// the manifests named in drop: a run, retention or a deletion keeps the
// index current. Two runs that update it at once may lose one's entry;
// the next listing reads that run's manifest and can write the index
// anew.
func UpdateIndex(ctx context.Context, w Writer, add []Entry, drop []string) error {
	ix := readIndex(ctx, w, IndexName)
	if ix == nil {
		ix = &Index{}
	}
	gone := map[string]bool{}
	for _, k := range drop {
		gone[k] = true
	}
	for _, e := range add {
		gone[e.Manifest] = true // replaced
	}
	kept := ix.Runs[:0]
	for _, e := range ix.Runs {
		if !gone[e.Manifest] {
			kept = append(kept, e)
		}
	}
	ix.Runs = append(kept, add...)
	b, err := ix.Marshal()
	if err != nil {
		return err
	}
	if err := w.Put(ctx, IndexName, b); err != nil {
		return fmt.Errorf("writing the index %s: %w", IndexName, err)
	}
	return nil
}
