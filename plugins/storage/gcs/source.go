package gcs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/ranged"
)

// SourceType is the "gcs" source.
type SourceType struct{}

var (
	_ sdk.SourceType      = SourceType{}
	_ sdk.MemoryEstimator = SourceType{}
	_ sdk.Source          = (*Source)(nil)
	_ io.Closer           = (*Source)(nil)
)

func (SourceType) Schema() sdk.Schema {
	attrs := []sdk.Attribute{
		commonAttributes()[0], // bucket
		{Name: "prefix", Type: sdk.String, Public: true, Description: `Read every object whose name starts with the prefix, one stream per object, named by its key relative to the prefix's folder (the part up to its last /). For a restore, point it at the backups' folder (e.g. "pg/nightly/"): the newest run's manifest under it says what to restore. "" is the whole bucket.`},
		{Name: "key", Type: sdk.String, Public: true, Description: `Read one object (relative to prefix when both are set), e.g. a run's manifest "pg/nightly/20260101T000000Z-abc123/pipe-manifest.json". The objects a manifest names are read from beside it.`},
		{Name: "part_size", Type: sdk.Size, Default: defaultPartSize, Profile: "part_size", Description: "The size of the ranges an object is read in (64KiB to 1GiB). Each range in flight holds one buffer of this size. The profile's part_size when not set."},
		{Name: "concurrency", Type: sdk.Number, Default: int64(defaultConcurrency), Profile: "concurrency", Description: "Ranges of one object read at once; each stream holds up to concurrency × part_size. The profile's concurrency when not set."},
	}
	attrs = append(attrs, commonAttributes()[1:]...)
	return sdk.Schema{
		Storage:     true,
		Description: "Reads objects of a Google Cloud Storage bucket (or an emulator's): every object under a prefix, or one object. Each object is read as parallel ranged reads, put back in order, with a failed range read again, and checked against the object's CRC32C.",
		Attributes:  attrs,
	}
}

type sourceConfig struct {
	PartSize    int64 `pipe:"part_size"`
	Concurrency int   `pipe:"concurrency"`
}

func sourceSettings(cfg sdk.Config) (sourceConfig, sdk.Diagnostics) {
	c := sourceConfig{PartSize: defaultPartSize, Concurrency: defaultConcurrency}
	if d := decode(cfg, &c); d.HasErrors() {
		return c, d
	}
	var d sdk.Diagnostics
	if c.PartSize < minPart || c.PartSize > maxPart {
		d = append(d, sdk.AttrError("part_size", "invalid part_size", fmt.Sprintf("part_size = %s; it must be between 64KiB and 1GiB", sdk.FormatSize(c.PartSize)))...)
	}
	if c.Concurrency < 1 || c.Concurrency > maxConc {
		d = append(d, sdk.AttrError("concurrency", "invalid concurrency", fmt.Sprintf("concurrency = %d; it must be between 1 and %d", c.Concurrency, maxConc))...)
	}
	return c, d
}

// Memory is concurrency buffers of part_size per stream, and the
// connections' buffers.
func (SourceType) Memory(cfg sdk.Config, streams int) int64 {
	c, d := sourceSettings(cfg)
	if d.HasErrors() {
		return 0
	}
	return int64(max(streams, 1)) * (int64(c.Concurrency)*c.PartSize + streamOverhead)
}

// SmallObjectMemory is Memory for objects of at most maxObject bytes: the
// ranges such an object has, each no larger than it.
func (SourceType) SmallObjectMemory(cfg sdk.Config, streams int, maxObject int64) int64 {
	c, d := sourceSettings(cfg)
	if d.HasErrors() {
		return 0
	}
	return int64(max(streams, 1)) * (ranged.Memory(c.PartSize, c.Concurrency, maxObject) + streamOverhead)
}

func (SourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	c, d := newConfig(cfg)
	if d.HasErrors() {
		return nil, d
	}
	sc, diags := sourceSettings(cfg)
	diags = append(diags, c.check()...)
	prefix, hasPrefix := stringValue(cfg, "prefix")
	key, hasKey := stringValue(cfg, "key")
	switch {
	case !hasPrefix && !hasKey:
		diags = append(diags, sdk.AttrError("", "nothing to read", `set prefix (a folder of backups, e.g. "pg/nightly/") or key (one object)`)...)
	case strings.HasPrefix(prefix, "/"):
		diags = append(diags, sdk.AttrError("prefix", "invalid prefix", "object names do not start with /: write "+fmt.Sprintf("%q", strings.TrimLeft(prefix, "/")))...)
	case hasKey && (key == "" || strings.HasSuffix(key, "/")):
		diags = append(diags, sdk.AttrError("key", "invalid key", "key names one object; to read a folder, use prefix")...)
	case hasKey && !hasPrefix && strings.HasPrefix(key, "/"):
		diags = append(diags, sdk.AttrError("key", "invalid key", "object names do not start with /: write "+fmt.Sprintf("%q", strings.TrimLeft(key, "/")))...)
	}
	if diags.HasErrors() {
		return nil, diags
	}
	cl, d := connect(ctx, c)
	diags = append(diags, d...)
	if diags.HasErrors() {
		return nil, diags
	}
	s := &Source{c: cl, part: sc.PartSize, conc: sc.Concurrency, listed: map[string]*storage.ObjectAttrs{}}
	switch {
	case hasKey && hasPrefix:
		s.root = prefix
		if prefix != "" && !strings.HasSuffix(prefix, "/") {
			s.root += "/"
		}
		s.key = key
	case hasKey:
		s.root = folder(key)
		s.key = key[len(s.root):]
	default:
		s.root, s.prefix, s.list = folder(prefix), prefix, true
	}
	return s, diags
}

// folder is the part of a key up to and including its last /.
func folder(key string) string {
	return key[:strings.LastIndex(key, "/")+1]
}

func stringValue(cfg sdk.Config, name string) (string, bool) {
	v, ok := cfg.Get(name)
	if !ok || v == nil {
		return "", false
	}
	s, ok := v.(string)
	return s, ok
}

// Source reads objects of a bucket.
type Source struct {
	c    *client
	root string // stream names are keys relative to it
	// list: every object under prefix; else the one object root+key.
	list   bool
	prefix string
	key    string
	part   int64
	conc   int

	mu     sync.Mutex
	listed map[string]*storage.ObjectAttrs // by stream name
}

// Streams lists the objects under the prefix (sorted by key), or the one
// object.
func (s *Source) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	if !s.list {
		a, err := s.c.bkt.Object(s.root + s.key).Attrs(ctx)
		if err != nil {
			return nil, s.c.explain("reading the attributes of", s.root+s.key, err)
		}
		s.remember(s.key, a)
		return []sdk.StreamInfo{{Name: s.key, Size: a.Size}}, nil
	}
	q := &storage.Query{Prefix: s.prefix}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Generation", "CRC32C", "Updated"}); err != nil {
		return nil, err
	}
	var out []sdk.StreamInfo
	it := s.c.bkt.Objects(ctx, q)
	for {
		a, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, s.c.explain("listing", s.prefix+"*", err)
		}
		if strings.HasSuffix(a.Name, "/") {
			continue // a folder placeholder (the console's "create folder")
		}
		name := a.Name[len(s.root):]
		s.remember(name, a)
		out = append(out, sdk.StreamInfo{Name: name, Size: a.Size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s*: no objects: check bucket and prefix (pipe lists every object whose name starts with the prefix): %w", s.c.url(s.prefix), sdk.ErrNotFound)
	}
	return out, nil
}

func (s *Source) remember(name string, a *storage.ObjectAttrs) {
	s.mu.Lock()
	s.listed[name] = a
	s.mu.Unlock()
}

func (s *Source) attrs(ctx context.Context, name string) (*storage.ObjectAttrs, error) {
	s.mu.Lock()
	a, ok := s.listed[name]
	s.mu.Unlock()
	if ok {
		return a, nil
	}
	a, err := s.c.bkt.Object(s.root + name).Attrs(ctx)
	if err != nil {
		return nil, s.c.explain("opening", s.root+name, err)
	}
	return a, nil
}

// Open reads a stream, or any object under the source's folder, in
// parallel ranges of the generation listed (or found now), so that every
// range comes from the same version of the object.
func (s *Source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if name == "" {
		return nil, fmt.Errorf("an empty stream name: %w", sdk.ErrNotFound)
	}
	a, err := s.attrs(ctx, name)
	if err != nil {
		return nil, err
	}
	key := s.root + name
	h := s.c.bkt.Object(key).Generation(a.Generation).ReadCompressed(s.c.compressed).Retryer(storage.WithPolicy(storage.RetryNever))
	open := func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
		r, err := h.NewRangeReader(ctx, off, n)
		if errors.Is(err, storage.ErrObjectNotExist) {
			// It was there a moment ago: a newer generation replaced it.
			return nil, fmt.Errorf("%w (generation %d is gone)", errChanged, a.Generation)
		}
		return r, err
	}
	return openRanges(ctx, open, rangeOptions{
		size: a.Size, part: s.part, conc: s.conc, retries: s.c.retries,
		crc: a.CRC32C, checkCRC: a.CRC32C != 0 || a.Size == 0,
		explain: func(op string, err error) error { return s.c.explain(op, key, err) },
	})
}

// OpenRange reads part of an object below the source's folder (see
// sdk.RangeOpener).
func (s *Source) OpenRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	if name == "" {
		return nil, fmt.Errorf("an empty stream name: %w", sdk.ErrNotFound)
	}
	return s.c.openRange(ctx, s.root+name, offset, length)
}

// Close releases the connections.
func (s *Source) Close() error { return s.c.close() }

var _ sdk.Selection = (*Source)(nil)

// Single reports whether key names one object (see sdk.Selection).
func (s *Source) Single() bool { return !s.list }
