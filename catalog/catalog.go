package catalog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Store is what the catalog reads: the objects under one root, by keys
// relative to it.
type Store interface {
	// List returns every object under the root.
	List(ctx context.Context) ([]sdk.ObjectInfo, error)
	// Open reads one object; errors wrap sdk.ErrNotFound when there is
	// none.
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// TempPrefix starts the base name of an object a sink has not committed
// yet (the fs sink's temporary files).
const TempPrefix = ".pipe-tmp-"

// Run is one complete run: a valid manifest whose objects stay inside the
// store.
type Run struct {
	// Key is the manifest's key.
	Key      string
	Manifest *manifest.Manifest
	// Pinned is true when the run has a pin (PinKey): no retention
	// deletes it.
	Pinned bool
}

// PinKey is where the pin of the run whose manifest is at manifestKey
// is: an object beside the manifest, written by pipe backups pin. The
// manifest itself is never rewritten.
func PinKey(manifestKey string) string { return manifestKey + ".pin" }

// Pin is what a pin object holds.
type Pin struct {
	PinnedAt time.Time `json:"pinned_at"`
	Reason   string    `json:"reason,omitempty"`
}

// ObjectKey returns where object o of the run is, relative to the root.
func (r *Run) ObjectKey(o manifest.Object) string { return manifest.Resolve(r.Key, o.Key) }

// Keys returns where every object of the run is, relative to the root: its
// objects', and its run key's (a passphrase backup), not its manifest's.
func (r *Run) Keys() []string {
	var out []string
	for _, o := range r.Manifest.Objects {
		out = append(out, r.ObjectKey(o))
	}
	if k := r.Manifest.RunKey; k != nil {
		out = append(out, manifest.Resolve(r.Key, k.Key))
	}
	return out
}

// Stored is the bytes the run's objects take in the store.
func (r *Run) Stored() int64 {
	var n int64
	for _, o := range r.Manifest.Objects {
		n += o.Size
	}
	return n
}

// Incomplete is a group of objects that no manifest names: a run that did
// not finish (or is still writing), by the run id in their keys.
type Incomplete struct {
	// RunID is the run id the keys hold, "" for objects without one.
	RunID string
	// Started is when the run started, from its id (zero when unknown).
	Started time.Time
	Objects []sdk.ObjectInfo
	Size    int64
}

// Invalid is a manifest that could not be read or is not one pipe could
// have written.
type Invalid struct {
	Key string
	Err error
}

// Catalog is what a store holds.
type Catalog struct {
	// Runs are the complete runs, newest (by finish time) first.
	Runs []*Run
	// Incomplete are objects no manifest names, grouped by run id, newest
	// first; objects whose keys hold no run id come last, as one group.
	Incomplete []*Incomplete
	// Invalid are manifests that were refused, with why.
	Invalid []Invalid
	// Packs are the objects of a deduplicating store's folder (see
	// manifest.PacksDir): packs of chunks the runs' lists name.
	Packs []sdk.ObjectInfo
	// Objects is every object listed.
	Objects []sdk.ObjectInfo
}

// runIDRE matches the run ids pipe makes: the UTC start time and 6 hex
// digits.
var runIDRE = regexp.MustCompile(`(\d{8}T\d{6}Z)-[0-9a-f]{6}`)

// RunTime returns when the run whose id appears in key started.
func RunTime(key string) (id string, t time.Time, ok bool) {
	m := runIDRE.FindStringSubmatch(key)
	if m == nil {
		return "", time.Time{}, false
	}
	t, err := time.Parse("20060102T150405Z", m[1])
	return m[0], t, err == nil
}

// readers bounds the manifests read at once.
const readers = 16

// Read lists the store and reads every manifest in it.
func Read(ctx context.Context, st Store) (*Catalog, error) {
	objs, err := st.List(ctx)
	if err != nil {
		return nil, err
	}
	c := &Catalog{Objects: objs}
	var keys []string
	listed := make(map[string]bool, len(objs))
	for _, o := range objs {
		listed[o.Key] = true
		if manifest.IsKey(o.Key) {
			keys = append(keys, o.Key)
		}
	}
	manifests := make([]*manifest.Manifest, len(keys))
	errs := make([]error, len(keys))
	var wg sync.WaitGroup
	sem := make(chan struct{}, readers)
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			manifests[i], errs[i] = ReadManifest(ctx, st, k)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	named := map[string]bool{IndexName: true}
	for i, k := range keys {
		named[k] = true
		if errors.Is(errs[i], sdk.ErrNotFound) {
			// Listed, then gone before it was read: deleted meanwhile (a
			// prune, another run's retention). The run is going; its
			// objects are what is left of it.
			continue
		}
		if errs[i] != nil {
			c.Invalid = append(c.Invalid, Invalid{Key: k, Err: errs[i]})
			continue
		}
		r := &Run{Key: k, Manifest: manifests[i], Pinned: listed[PinKey(k)]}
		named[PinKey(k)] = true
		if err := r.inside(); err != nil {
			c.Invalid = append(c.Invalid, Invalid{Key: k, Err: err})
			continue
		}
		for _, k := range r.Keys() {
			named[k] = true
		}
		c.Runs = append(c.Runs, r)
	}
	sort.SliceStable(c.Runs, func(i, j int) bool {
		a, b := c.Runs[i].Manifest, c.Runs[j].Manifest
		if !a.FinishedAt.Equal(b.FinishedAt) {
			return a.FinishedAt.After(b.FinishedAt)
		}
		return c.Runs[i].Key > c.Runs[j].Key
	})
	groups := map[string]*Incomplete{}
	for _, o := range objs {
		if named[o.Key] {
			continue
		}
		if manifest.InPacks(o.Key) {
			c.Packs = append(c.Packs, o)
			continue
		}
		id, t, _ := RunTime(o.Key)
		g := groups[id]
		if g == nil {
			g = &Incomplete{RunID: id, Started: t}
			groups[id] = g
			c.Incomplete = append(c.Incomplete, g)
		}
		g.Objects = append(g.Objects, o)
		g.Size += o.Size
	}
	sort.SliceStable(c.Incomplete, func(i, j int) bool {
		a, b := c.Incomplete[i], c.Incomplete[j]
		if (a.RunID == "") != (b.RunID == "") {
			return b.RunID == ""
		}
		return a.RunID > b.RunID
	})
	return c, nil
}

// inside checks that every object of the run stays inside the store.
func (r *Run) inside() error {
	for _, k := range r.Keys() {
		if k == ".." || strings.HasPrefix(k, "../") || strings.HasPrefix(k, "/") {
			return fmt.Errorf("invalid manifest: object %q lies outside the store", k)
		}
	}
	return nil
}

// ReadManifest reads and checks the manifest at key.
func ReadManifest(ctx context.Context, st interface {
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}, key string) (*manifest.Manifest, error) {
	m, _, err := ReadManifestBytes(ctx, st, key)
	return m, err
}

// ReadManifestBytes reads the manifest at key and checks it; it returns
// the bytes as stored too, which are what a signature covers (see
// package signing).
func ReadManifestBytes(ctx context.Context, st interface {
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}, key string) (*manifest.Manifest, []byte, error) {
	rc, err := st.Open(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, manifest.MaxSize+1))
	if err != nil {
		return nil, nil, err
	}
	if len(b) > manifest.MaxSize {
		return nil, nil, fmt.Errorf("larger than %d bytes", manifest.MaxSize)
	}
	m, err := manifest.Parse(b)
	if err != nil {
		return nil, nil, err
	}
	return m, b, nil
}

// Run returns the complete run with the given id, or nil.
func (c *Catalog) Run(id string) *Run {
	for _, r := range c.Runs {
		if r.Manifest.RunID == id {
			return r
		}
	}
	return nil
}

// Newer returns the incomplete runs (with a run id) that started after t:
// a restore of the newest complete run says they exist.
func (c *Catalog) Newer(t time.Time) []*Incomplete {
	var out []*Incomplete
	for _, g := range c.Incomplete {
		if g.RunID != "" && g.Started.After(t) {
			out = append(out, g)
		}
	}
	return out
}

// ErrNoRun is wrapped by errors when a store holds no complete run.
var ErrNoRun = errors.New("no complete run")

// Selection says which run of a store to read: by id, the newest that
// finished before a time, or the newest; of one pipeline.
type Selection struct {
	// RunID is the run to read ("": the newest, or the newest Before).
	RunID string
	// Before, when not zero, picks the newest run that finished before it.
	Before time.Time
	// Pipeline is the pipeline whose runs count ("": the store's only
	// pipeline; a store with runs of several is ambiguous).
	Pipeline string
	// Target, when set, is the point the restore recovers to: without
	// RunID and Before, the newest run that reaches it is read; a run
	// they choose that does not is refused, naming the newest that does.
	Target *Target
}

// Target is the point a restore recovers to (a sink's Target attribute,
// see sdk.Attribute). A recovery replays forward from the end of the run
// it restores, so only a run that ended before the target reaches it:
// restoring a later one would succeed, and then the server would refuse
// to start.
type Target struct {
	// Attribute and Value say where it was set, for messages.
	Attribute, Value string
	// Time, when not zero, is a moment: a run reaches it when it
	// finished before it.
	Time time.Time
	// LSN, when not zero, is a position in PostgreSQL's write-ahead log:
	// a base backup's run reaches it when it ended (its stop_lsn fact) at
	// or before it. Runs without the fact are not judged.
	LSN uint64
}

// factStopLSN is where a base backup's run ended in the WAL (the
// postgres_basebackup source's fact; wal.BackupRange reads it too).
const factStopLSN = "stop_lsn"

func (t *Target) String() string { return fmt.Sprintf("%s = %q", t.Attribute, t.Value) }

// Reaches reports whether a restore of r can recover to t; when it
// cannot, why.
func (t *Target) Reaches(r *Run) (bool, string) {
	m := r.Manifest
	if !t.Time.IsZero() && !m.FinishedAt.Before(t.Time) {
		return false, "it finished at " + TimeText(m.FinishedAt)
	}
	if s, ok := m.Source[factStopLSN]; ok && t.LSN != 0 {
		stop, err := sdk.ParseLSN(s)
		if err != nil {
			return false, fmt.Sprintf("its manifest's %s %q is not a WAL position", factStopLSN, s)
		}
		if stop > t.LSN {
			return false, "it ended at WAL position " + s
		}
	}
	return true, ""
}

// reachable returns r, or why a restore of it cannot reach sel.Target,
// naming the newest of runs that can.
func (sel Selection) reachable(r *Run, runs []*Run) (*Run, error) {
	if sel.Target == nil {
		return r, nil
	}
	ok, why := sel.Target.Reaches(r)
	if ok {
		return r, nil
	}
	what := "no run here can: choose a later target"
	for _, o := range runs {
		if ok, _ := sel.Target.Reaches(o); ok {
			id := o.Manifest.RunID
			what = fmt.Sprintf("restore run %s, the newest that can (run = %q in the source, or --run %s), or choose a later target", id, id, id)
			break
		}
	}
	return nil, fmt.Errorf("run %s cannot be recovered to %s: %s, after the target, and a recovery replays forward from the end of the backup it restores (the server would refuse to start); %s", r.Manifest.RunID, sel.Target, why, what)
}

// Select returns the run sel names. Its errors say what the store holds
// and how to choose.
func (c *Catalog) Select(sel Selection) (*Run, error) {
	runs := c.Runs
	if sel.Pipeline != "" {
		runs = nil
		for _, r := range c.Runs {
			if r.Manifest.Pipeline == sel.Pipeline {
				runs = append(runs, r)
			}
		}
		if len(runs) == 0 {
			return nil, fmt.Errorf("no complete run of pipeline %q (%w); %s", sel.Pipeline, ErrNoRun, c.pipelinesText())
		}
	} else if ps := c.Pipelines(); len(ps) > 1 && sel.RunID == "" {
		return nil, fmt.Errorf("the runs are of %d pipelines (%s): say which to restore with pipeline = \"…\" in the source", len(ps), strings.Join(ps, ", "))
	}
	switch {
	case sel.RunID != "":
		for _, r := range runs {
			if r.Manifest.RunID == sel.RunID {
				return sel.reachable(r, runs)
			}
		}
		return nil, fmt.Errorf("no complete run %s (%w); %s", sel.RunID, ErrNoRun, c.newestText(runs))
	case !sel.Before.IsZero():
		for _, r := range runs {
			if r.Manifest.FinishedAt.Before(sel.Before) {
				return sel.reachable(r, runs)
			}
		}
		return nil, fmt.Errorf("no complete run finished before %s (%w); %s", TimeText(sel.Before), ErrNoRun, c.oldestText(runs))
	case len(runs) == 0:
		return nil, ErrNoRun
	case sel.Target != nil:
		for _, r := range runs {
			if ok, _ := sel.Target.Reaches(r); ok {
				return r, nil
			}
		}
		oldest := runs[len(runs)-1]
		_, why := sel.Target.Reaches(oldest)
		return nil, fmt.Errorf("no complete run can be recovered to %s (%w): the oldest, %s: %s, after the target; choose a later target", sel.Target, ErrNoRun, oldest.Manifest.RunID, why)
	}
	return runs[0], nil
}

// Pipelines lists the pipelines that have complete runs, sorted.
func (c *Catalog) Pipelines() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range c.Runs {
		if p := r.Manifest.Pipeline; !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

func (c *Catalog) pipelinesText() string {
	if ps := c.Pipelines(); len(ps) > 0 {
		return "the store holds runs of " + strings.Join(ps, ", ")
	}
	return "the store holds no complete run"
}

func (c *Catalog) newestText(runs []*Run) string {
	if len(runs) == 0 {
		return c.pipelinesText()
	}
	var ids []string
	for _, r := range runs[:min(len(runs), 3)] {
		ids = append(ids, r.Manifest.RunID)
	}
	return "the newest are " + strings.Join(ids, ", ") + " (pipe backups lists them all)"
}

func (c *Catalog) oldestText(runs []*Run) string {
	if len(runs) == 0 {
		return c.pipelinesText()
	}
	o := runs[len(runs)-1].Manifest
	return fmt.Sprintf("the oldest, %s, finished at %s", o.RunID, TimeText(o.FinishedAt))
}
