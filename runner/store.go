package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Store is where a pipeline keeps its runs (a backup's storage sink) or
// reads them from (a restore's storage source), opened for the catalog:
// listing, showing, verifying and deleting runs. Keys are relative to its
// root.
type Store struct {
	// Pipeline is the pipeline whose endpoint the store is.
	Pipeline string
	// Kind is "sink" or "source"; Type the endpoint's type.
	Kind, Type string
	// Root is the folder (prefix) the runs are under, as the endpoint's
	// keys are written ("" for a source: its own folder).
	Root string
	// Def is the endpoint as the file declares it.
	Def *pipefile.Endpoint
	// Grace is how old a pack of chunks no run names must be before prune
	// deletes it (the pipeline's dedup { grace }).
	Grace time.Duration
	ep    *endpoint
}

var _ catalog.Writer = (*Store)(nil)

// Where says what the store is, for people: the endpoint and its place.
func (s *Store) Where() string {
	if s.Kind == "sink" {
		return fmt.Sprintf("sink %s %s", s.Type, strings.TrimSpace(s.Def.Key.Attr+" "+quote(s.Root)))
	}
	return fmt.Sprintf("source %s %s", s.Type, where(s.ep))
}

func quote(root string) string {
	if root == "" {
		return "(the whole store)"
	}
	return fmt.Sprintf("%q", root)
}

// Writable reports whether runs can be deleted from the store (it is a
// sink's).
func (s *Store) Writable() bool { return s.ep.sink != nil }

// List returns every object under the root.
func (s *Store) List(ctx context.Context) ([]sdk.ObjectInfo, error) {
	if s.ep.sink != nil {
		return sinkStore{st: s.ep.sink.(sdk.Storage), root: s.Root}.List(ctx)
	}
	infos, err := s.ep.source.Streams(ctx)
	if err != nil {
		return nil, fmt.Errorf("source %s: listing: %w", s.Type, err)
	}
	return sourceStore{src: s.ep.source, infos: infos}.List(ctx)
}

// Open reads the object at key.
func (s *Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if s.ep.sink != nil {
		return s.ep.sink.(sdk.Storage).Open(ctx, s.Root+key)
	}
	return s.ep.source.Open(ctx, key)
}

// OpenRange reads part of the object at key (see sdk.OpenRange).
func (s *Store) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	if s.ep.sink != nil {
		return sdk.OpenRange(ctx, s.ep.sink.(sdk.Storage), s.Root+key, offset, length)
	}
	return sdk.OpenRange(ctx, s.ep.source, key, offset, length)
}

// Put replaces a small object (the index) at key.
func (s *Store) Put(ctx context.Context, key string, b []byte) error {
	if s.ep.sink == nil {
		return errors.New("a source cannot write")
	}
	return replace(ctx, s.ep.sink, s.Root+key, b)
}

// Remove deletes the object at key.
func (s *Store) Remove(ctx context.Context, key string) error {
	if s.ep.sink == nil {
		return fmt.Errorf("pipeline %q reads this store as a source, which cannot delete: use a pipeline whose sink it is", s.Pipeline)
	}
	return s.ep.sink.(sdk.Storage).Remove(ctx, s.Root+key)
}

// Source reads the store's objects by key, for the engine (pipe verify).
func (s *Store) Source() sdk.Source { return storeSource{s} }

type storeSource struct{ s *Store }

func (r storeSource) Streams(context.Context) ([]sdk.StreamInfo, error) { return nil, nil }
func (r storeSource) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return r.s.Open(ctx, key)
}

func (r storeSource) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	return r.s.OpenRange(ctx, key, offset, length)
}

// Close lets go of the endpoint.
func (s *Store) Close() {
	if s.ep.sink != nil {
		closeAll(nil, []*endpoint{s.ep})
	} else {
		closeAll(s.ep, nil)
	}
}

// OpenStores opens the stores of a pipeline: each storage sink that keeps
// runs, or its storage source when it has none (a restore).
func OpenStores(ctx context.Context, p *plan.Pipeline, reg *host.Registry) ([]*Store, error) {
	var out []*Store
	closeOut := func() {
		for _, s := range out {
			s.Close()
		}
	}
	var diags hcl.Diagnostics
	for i, def := range p.Sinks {
		if !p.WritesManifest() || !def.Stores() {
			continue // a restore's sink keeps no runs
		}
		root, err := RunsRoot(def.Key)
		if err != nil {
			closeOut()
			return nil, fmt.Errorf("sink %s: %w", def.Type, err)
		}
		name := def.Type
		if len(p.Sinks) > 1 {
			name = fmt.Sprintf("%s#%d", def.Type, i+1)
		}
		ep, d, err := configureOne(ctx, def, reg, name)
		if err != nil {
			closeOut()
			return nil, err
		}
		diags = append(diags, d...)
		if ep.sink != nil {
			if _, ok := ep.sink.(sdk.Storage); !ok {
				closeOut()
				return nil, fmt.Errorf("sink %s cannot list or read back its objects", name)
			}
			out = append(out, &Store{Pipeline: p.Name, Kind: "sink", Type: def.Type, Root: root, Def: def, Grace: graceOf(p), ep: ep})
		}
	}
	if len(out) == 0 && p.Source != nil && p.Source.Schema.Storage {
		ep, d, err := configureOne(ctx, p.Source, reg, p.Source.Type)
		if err != nil {
			return nil, err
		}
		diags = append(diags, d...)
		if ep.source != nil {
			out = append(out, &Store{Pipeline: p.Name, Kind: "source", Type: p.Source.Type, Def: p.Source, ep: ep})
		}
	}
	if diags.HasErrors() {
		closeOut()
		return nil, &DiagError{diags}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pipeline %q neither keeps runs in a store (a storage sink with a path) nor reads them from one (a storage source)", p.Name)
	}
	return out, nil
}

// runIDMarker stands for a run id when a store's root is worked out.
const runIDMarker = "PIPE-RUN-ID-MARKER"

// RunsRoot is the folder a sink keeps its runs under: its path up to
// ${run.id}, or the manifest's folder when each run does not have its own.
func RunsRoot(k *pipefile.KeyTemplate) (string, error) {
	if k == nil {
		return "", errors.New("no object path")
	}
	mk, err := k.For(runIDMarker).ManifestKey()
	if err != nil {
		return "", err
	}
	if i := strings.Index(mk, runIDMarker); i >= 0 {
		return mk[:i], nil
	}
	if d := path.Dir(mk); d != "." {
		return d + "/", nil
	}
	return "", nil
}
