package azure

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/ranged"
)

// SourceType is the "azure" source.
type SourceType struct{}

var (
	_ sdk.SourceType      = SourceType{}
	_ sdk.MemoryEstimator = SourceType{}
	_ sdk.Source          = (*Source)(nil)
)

func (SourceType) Schema() sdk.Schema {
	attrs := []sdk.Attribute{
		{Name: "prefix", Type: sdk.String, Public: true, Default: "", Description: `Read the blobs whose names start with prefix, one stream each, named by the rest of their name after prefix's last "/" (so "pg/nightly/" yields "RUN/db.zst" and "RUN/pipe-manifest.json"; a restore follows the newest manifest). Empty: the whole container.`},
		{Name: "key", Type: sdk.String, Public: true, Default: "", Description: "Read one blob (its name, inside prefix when both are set) as one stream named by its last part."},
	}
	attrs = append(attrs, commonAttributes("Restoring needs read and list permissions.")...)
	return sdk.Schema{
		Storage:     true,
		Description: "Reads blobs of an Azure Storage container: each with parallel ranged downloads (concurrency ranges of block_size), reassembled in order through a fixed set of buffers, every range pinned to the blob's ETag and resumed when its transfer breaks.",
		Attributes:  attrs,
	}
}

type sourceConfig struct {
	common
	Prefix string `pipe:"prefix"`
	Key    string `pipe:"key"`
}

func decodeSource(cfg sdk.Config) (sourceConfig, sdk.Diagnostics) {
	c := sourceConfig{common: defaultCommon()}
	d := decode(cfg, &c, &c.common)
	if strings.HasPrefix(c.Prefix, "/") {
		d = append(d, sdk.AttrError("prefix", "invalid prefix", "blob names are relative to the container: drop the leading /")...)
	}
	if c.Key != "" {
		if err := checkBlobName(c.Prefix + c.Key); err != nil {
			d = append(d, sdk.AttrError("key", "invalid key", err.Error())...)
		}
	}
	return c, d
}

func (SourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	c, d := decodeSource(cfg)
	if d.HasErrors() {
		return nil, d
	}
	cl, err := c.connect()
	if err != nil {
		return nil, sdk.AttrError("", "cannot make the Azure client", err.Error())
	}
	if d := cl.probe(ctx, false); d.HasErrors() {
		return nil, d
	}
	s := &Source{client: cl, prefix: c.Prefix}
	if c.Key != "" {
		full := c.Prefix + c.Key
		s.root = full[:strings.LastIndex(full, "/")+1]
		s.one = full[len(s.root):]
	} else {
		s.root = c.Prefix[:strings.LastIndex(c.Prefix, "/")+1]
	}
	return s, d
}

// Memory is what the range buffers hold: concurrency ranges of block_size
// per stream.
func (SourceType) Memory(cfg sdk.Config, streams int) int64 {
	c, _ := decodeSource(cfg)
	return int64(max(streams, 1)) * max(c.BlockSize, 0) * max(c.Concurrency, 1)
}

// SmallObjectMemory is Memory for blobs of at most maxObject bytes: the
// ranges such a blob has, each no larger than it.
func (SourceType) SmallObjectMemory(cfg sdk.Config, streams int, maxObject int64) int64 {
	c, _ := decodeSource(cfg)
	return int64(max(streams, 1)) * ranged.Memory(c.BlockSize, int(max(c.Concurrency, 1)), maxObject)
}

// Source reads blobs of one container.
type Source struct {
	*client
	prefix string // what Streams lists
	root   string // stream names are relative to it
	one    string // the one stream, with key
}

// Streams lists the one blob (key), or every blob under prefix, by name.
func (s *Source) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	if s.one != "" {
		props, err := s.c.NewBlobClient(s.root+s.one).GetProperties(ctx, nil)
		if err != nil {
			return nil, s.explain("reading the properties of", s.where+"/"+s.root+s.one, err)
		}
		size := int64(-1)
		if props.ContentLength != nil {
			size = *props.ContentLength
		}
		return []sdk.StreamInfo{{Name: s.one, Size: size}}, nil
	}
	var out []sdk.StreamInfo
	err := s.list(ctx, s.prefix, func(name string, it *container.BlobItem) {
		size := int64(-1)
		if it.Properties != nil && it.Properties.ContentLength != nil {
			size = *it.Properties.ContentLength
		}
		out = append(out, sdk.StreamInfo{Name: strings.TrimPrefix(name, s.root), Size: size})
	})
	if err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no blobs under %s/%s: check prefix (blob names are case-sensitive) and bucket", s.where, s.prefix)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Open reads the blob named root+name: a stream Streams listed, or any blob
// below the source's folder (the objects a manifest names). A missing blob
// is sdk.ErrNotFound.
func (s *Source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if name == "" || strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("%q is not a blob name below %s/%s", name, s.where, s.root)
	}
	return openBlob(ctx, s.client, s.root+name)
}

// OpenRange reads part of a blob below the source's folder (see
// sdk.RangeOpener).
func (s *Source) OpenRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	if name == "" || strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("%q is not a blob name below %s/%s", name, s.where, s.root)
	}
	return openBlobRange(ctx, s.client, s.root+name, offset, length)
}

var _ sdk.Selection = (*Source)(nil)

// Single reports whether key names one blob (see sdk.Selection).
func (s *Source) Single() bool { return s.one != "" }
