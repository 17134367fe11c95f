package azure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/objlock"
)

// SinkType is the "azure" sink.
type SinkType struct{}

var (
	_ sdk.SinkType        = SinkType{}
	_ sdk.MemoryEstimator = SinkType{}
	_ sdk.Sink            = (*Sink)(nil)
	_ sdk.Storage         = (*Sink)(nil)
)

func (SinkType) Schema() sdk.Schema {
	attrs := []sdk.Attribute{
		{Name: "key", Type: sdk.String, Required: true, Key: true, Description: `The blob name of each stream, inside the container. A key ending in "/" is a folder that receives every stream as ${stream.name}${stream.ext} (e.g. "pg/${pipeline.name}/${run.id}/"); a key that mentions ${stream.name} is a template; any other key is one blob and the source must yield exactly one stream.`},
	}
	attrs = append(attrs, commonAttributes("Backing up needs write and create permissions; retention also delete, list and read.")...)
	attrs = append(attrs,
		sdk.Attribute{Name: "max_single_put_size", Type: sdk.Size, Default: int64(defaultSinglePut), Description: "Objects up to this size go up in one Put Blob when their stream ends (one request: the lowest latency for small objects such as WAL segments); larger ones as blocks staged while the stream flows, then committed. 0 stages every object in blocks. At most 5000MiB."},
		sdk.Attribute{Name: "access_tier", Type: sdk.String, Default: "", Description: `The access tier the blobs are written in: "Hot", "Cool", "Cold" or "Archive" (an archived blob must be rehydrated before a restore). Empty: the account's default.`},
	)
	attrs = append(attrs, objlock.Attributes("an Azure Blob immutability policy", "the container must have version-level immutability support")...)
	return sdk.Schema{
		Description:     "Writes each stream to a block blob in an Azure Storage container: blocks of block_size, concurrency of them in flight per object, each checked by the service against its MD5 and retried; the blob appears only when its block list is committed, after the stream ended well. Also lists, reads back and deletes blobs, for manifests and retention.",
		Storage:         true,
		ExclusiveCreate: true,
		Attributes:      attrs,
	}
}

type sinkConfig struct {
	common
	MaxSinglePut int64  `pipe:"max_single_put_size"`
	AccessTier   string `pipe:"access_tier"`
	Lock         objlock.Config
}

func decodeSink(cfg sdk.Config) (sinkConfig, sdk.Diagnostics) {
	c := sinkConfig{common: defaultCommon(), MaxSinglePut: defaultSinglePut, Lock: objlock.Default()}
	d := decode(cfg, &c, &c.common)
	if err := cfg.Decode(&c.Lock); err != nil {
		d = append(d, sdk.AttrError("", "invalid configuration", err.Error())...)
	}
	d = append(d, c.Lock.Check()...)
	if c.MaxSinglePut < 0 || c.MaxSinglePut > maxSinglePut {
		d = append(d, sdk.AttrError("max_single_put_size", "single put size out of range", fmt.Sprintf("max_single_put_size = %s: Put Blob takes at most 5000MiB (0: always stage blocks)", sdk.FormatSize(c.MaxSinglePut)))...)
	}
	if c.AccessTier != "" && tier(c.AccessTier) == nil {
		d = append(d, sdk.AttrError("access_tier", "unknown access tier", fmt.Sprintf("access_tier = %q: use Hot, Cool, Cold or Archive, or leave it unset for the account's default", c.AccessTier))...)
	}
	return c, d
}

func tier(s string) *blob.AccessTier {
	for _, t := range []blob.AccessTier{blob.AccessTierHot, blob.AccessTierCool, blob.AccessTierCold, blob.AccessTierArchive} {
		if strings.EqualFold(s, string(t)) {
			return &t
		}
	}
	return nil
}

func (SinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	c, d := decodeSink(cfg)
	if d.HasErrors() {
		return nil, d
	}
	cl, err := c.connect()
	if err != nil {
		return nil, sdk.AttrError("", "cannot make the Azure client", err.Error())
	}
	if d := cl.probe(ctx, c.Lock.On()); d.HasErrors() {
		return nil, d
	}
	return &Sink{client: cl, singlePut: c.MaxSinglePut, tier: tier(c.AccessTier), lk: c.Lock}, d
}

// Memory is what the sink's block buffers hold at most: per object, the
// larger of concurrency blocks and the blocks an object up to
// max_single_put_size is held in until its stream ends.
func (SinkType) Memory(cfg sdk.Config, streams int) int64 {
	c, _ := decodeSink(cfg)
	if c.BlockSize <= 0 {
		return 0
	}
	return int64(max(streams, 1)) * c.BlockSize * int64(buffersPerObject(c.BlockSize, int(c.Concurrency), c.MaxSinglePut))
}

// SmallObjectMemory is Memory for blobs of at most maxObject bytes: the
// blocks such a blob fills, no more than a writer holds.
func (SinkType) SmallObjectMemory(cfg sdk.Config, streams int, maxObject int64) int64 {
	c, _ := decodeSink(cfg)
	if c.BlockSize <= 0 {
		return 0
	}
	bs := blockSizeFor(c.BlockSize, maxObject, maxObject)
	blocks := min((maxObject+bs-1)/bs, int64(buffersPerObject(bs, int(c.Concurrency), c.MaxSinglePut)))
	return int64(max(streams, 1)) * bs * max(blocks, 1)
}

// buffersPerObject is how many block buffers one object's writer may hold.
func buffersPerObject(blockSize int64, concurrency int, singlePut int64) int {
	held := int((singlePut + blockSize - 1) / blockSize)
	return max(concurrency, held, 1)
}

// Sink writes block blobs into one container.
type Sink struct {
	*client
	singlePut int64
	tier      *blob.AccessTier
	lk        objlock.Config
	pool      sync.Pool // block buffers of objects that ended, for the next ones
}

// Create starts a blob at obj.Key. Nothing is sent until a block is full
// (or, below max_single_put_size, until Commit).
func (s *Sink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	if err := checkBlobName(obj.Key); err != nil {
		return nil, fmt.Errorf("object %q in container %s: %w", obj.Key, s.bucket, err)
	}
	bs := blockSizeFor(s.blockSize, obj.Size, obj.MaxSize)
	return newBlockWriter(ctx, s, obj, bs), nil
}

// blockSizeFor raises the block size when an object of the known (or
// bounded) size would need more than 50,000 blocks; it never lowers it.
func blockSizeFor(bs, size, maxSize int64) int64 {
	n := size
	if n < 0 {
		n = maxSize
	}
	if n <= bs*maxBlocks {
		return bs
	}
	need := (n + maxBlocks - 1) / maxBlocks
	need = (need + mib - 1) / mib * mib
	return min(need, maxBlockSize)
}

func checkBlobName(key string) error {
	switch {
	case key == "":
		return errors.New("empty blob name")
	case strings.HasPrefix(key, "/"):
		return errors.New("a blob name is relative to the container: drop the leading /")
	case strings.HasSuffix(key, "/"):
		return errors.New("a blob name may not end in /")
	case len(key) > maxBlobName:
		return fmt.Errorf("a blob name has at most %d characters", maxBlobName)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "." || seg == ".." {
			return errors.New(`"." and ".." are not allowed as parts of a blob name`)
		}
	}
	return nil
}

func (s *Sink) blobURL(key string) string { return s.where + "/" + key }

// List returns the committed blobs whose names start with prefix, by name.
func (s *Sink) List(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error) {
	var out []sdk.ObjectInfo
	err := s.list(ctx, prefix, func(name string, it *container.BlobItem) {
		info := sdk.ObjectInfo{Key: name, Size: -1}
		if p := it.Properties; p != nil {
			if p.ContentLength != nil {
				info.Size = *p.ContentLength
			}
			if p.LastModified != nil {
				info.Modified = *p.LastModified
			}
		}
		out = append(out, info)
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, err
}

// list calls f for every committed blob under prefix.
func (cl *client) list(ctx context.Context, prefix string, f func(name string, it *container.BlobItem)) error {
	opts := &container.ListBlobsFlatOptions{Include: container.ListBlobsInclude{Metadata: true}}
	if prefix != "" {
		opts.Prefix = &prefix
	}
	pager := cl.c.NewListBlobsFlatPager(opts)
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return cl.explain("listing blobs under", cl.where+"/"+prefix, err)
		}
		if page.Segment == nil {
			continue
		}
		for _, it := range page.Segment.BlobItems {
			if it == nil || it.Name == nil {
				continue
			}
			if it.Metadata != nil {
				// Folders of accounts with a hierarchical namespace.
				if v := it.Metadata["hdi_isfolder"]; v != nil && strings.EqualFold(*v, "true") {
					continue
				}
			}
			f(*it.Name, it)
		}
	}
	return nil
}

// Open reads a committed blob; a missing one is sdk.ErrNotFound.
func (s *Sink) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return openBlob(ctx, s.client, key)
}

// OpenRange reads part of a committed blob (see sdk.RangeOpener).
func (s *Sink) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	return openBlobRange(ctx, s.client, key, offset, length)
}

var _ sdk.Locker = (*Sink)(nil)

// ObjectLock says how the blob at key is protected: its immutability
// policy ("Locked" is compliance, "Unlocked" governance) and legal hold.
func (s *Sink) ObjectLock(ctx context.Context, key string) (sdk.Lock, error) {
	p, err := s.c.NewBlobClient(key).GetProperties(ctx, nil)
	if err != nil {
		return sdk.Lock{}, s.explain("looking up the immutability policy of", s.blobURL(key), err)
	}
	l := sdk.Lock{LegalHold: p.LegalHold != nil && *p.LegalHold}
	if p.ImmutabilityPolicyExpiresOn != nil && p.ImmutabilityPolicyMode != nil {
		l.Mode, l.Until = "GOVERNANCE", *p.ImmutabilityPolicyExpiresOn
		if *p.ImmutabilityPolicyMode == blob.ImmutabilityPolicyModeLocked {
			l.Mode = "COMPLIANCE"
		}
	}
	return l, nil
}

// Remove deletes a blob and its snapshots; a blob that is not there is
// not an error.
func (s *Sink) Remove(ctx context.Context, key string) error {
	_, err := s.c.NewBlobClient(key).Delete(ctx, &blob.DeleteOptions{DeleteSnapshots: ptr(blob.DeleteSnapshotsOptionTypeInclude)})
	if err == nil || bloberror.HasCode(err, bloberror.BlobNotFound) {
		return nil
	}
	return s.explain("deleting", s.blobURL(key), err)
}

func ptr[T any](v T) *T { return &v }
