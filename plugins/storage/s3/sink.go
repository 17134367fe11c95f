package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/hugepage"
	"github.com/pipebackup/pipe/plugins/storage/internal/objlock"
)

// SinkType is the "s3" sink.
type SinkType struct{}

var (
	_ sdk.SinkType        = SinkType{}
	_ sdk.MemoryEstimator = SinkType{}
	_ sdk.Storage         = (*Sink)(nil)
	_ io.Closer           = (*Sink)(nil)
)

func (SinkType) Schema() sdk.Schema {
	attrs := []sdk.Attribute{
		{Name: "key", Type: sdk.String, Required: true, Key: true, Description: `Where each stream goes in the bucket. A key ending in "/" is a folder that receives every stream as ${stream.name}${stream.ext} (e.g. "pg/${pipeline.name}/${run.id}/"); a key that mentions ${stream.name} is a template; any other key is one object and the source must yield exactly one stream.`},
		{Name: "part_size", Type: sdk.Size, Default: defaultPartSize, Profile: "part_size", Description: "The size of the parts of a multipart upload (at least 5MiB). Objects smaller than a part go up in one request; larger ones are raised as needed so that an object of known size never needs more than 10,000 parts. A stream of unknown size can reach 10,000 × part_size."},
		{Name: "concurrency", Type: sdk.Number, Default: int64(defaultConcurrency), Profile: "concurrency", Description: "Parts of one object in memory and in flight at once: each stream buffers up to concurrency × part_size."},
		{Name: "checksum", Type: sdk.String, Default: "crc32c", Description: `The checksum sent with every part, which the store verifies before it accepts the bytes: "crc32c", "crc32", "sha256", or "none" for stores that reject checksums.`},
		{Name: "storage_class", Type: sdk.String, Default: "", Description: `The storage class of the objects, e.g. "STANDARD_IA" or "GLACIER_IR"; empty uses the bucket's default.`},
		{Name: "server_side_encryption", Type: sdk.String, Default: "", Description: `Server-side encryption: "AES256", "aws:kms" or "aws:kms:dsse"; empty uses the bucket's default.`},
		{Name: "sse_kms_key_id", Type: sdk.String, Default: "", Description: `The KMS key for server_side_encryption = "aws:kms"; empty uses the account's default key.`},
	}
	attrs = append(attrs, lockAttrs...)
	return sdk.Schema{
		Description:     "Writes each stream as an object in an S3 bucket (AWS or an S3-compatible store): multipart uploads of parallel parts with checksums the store verifies, completed only when the stream ended well and aborted otherwise, so an object exists only once it is whole.",
		Storage:         true,
		ExclusiveCreate: true,
		Attributes:      withConn(attrs),
	}
}

type sinkConfig struct {
	Checksum     string `pipe:"checksum"`
	StorageClass string `pipe:"storage_class"`
	SSE          string `pipe:"server_side_encryption"`
	KMSKeyID     string `pipe:"sse_kms_key_id"`
}

func (t SinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	var c sinkConfig
	var cc connConfig
	c.Checksum = "crc32c"
	lk := objlock.Default()
	diags := decodeConn(cfg, &c, &cc, minPartSize)
	if err := cfg.Decode(&lk); err != nil {
		diags = append(diags, sdk.AttrError("", "invalid configuration", err.Error())...)
	}
	diags = append(diags, checkLock(lk, c.Checksum)...)
	if lk.On() {
		cc.Versioned = true // a locked bucket keeps versions
	}
	sum, ok := checksums[strings.ToLower(c.Checksum)]
	if !ok {
		diags = append(diags, sdk.AttrError("checksum", "unknown checksum", fmt.Sprintf("%q: use \"crc32c\", \"crc32\", \"sha256\" or \"none\"", c.Checksum))...)
	}
	if c.StorageClass != "" {
		known := types.StorageClass("").Values()
		if !slices.Contains(known, types.StorageClass(c.StorageClass)) {
			diags = append(diags, sdk.Diagnostic{Severity: sdk.Warning, Attribute: "storage_class", Summary: "unknown storage class",
				Detail: fmt.Sprintf("%q is not one of AWS's storage classes; it is sent as it is (other stores have their own)", c.StorageClass)})
		}
		switch types.StorageClass(c.StorageClass) {
		case types.StorageClassGlacier, types.StorageClassDeepArchive:
			diags = append(diags, sdk.Diagnostic{Severity: sdk.Warning, Attribute: "storage_class", Summary: "archived objects cannot be restored directly",
				Detail: fmt.Sprintf("objects in %s must be restored (thawed) in S3 before pipe can read them back, manifests included; GLACIER_IR can be read at once", c.StorageClass)})
		}
	}
	switch c.SSE {
	case "", "AES256", "aws:kms", "aws:kms:dsse":
	default:
		diags = append(diags, sdk.AttrError("server_side_encryption", "unknown server-side encryption", fmt.Sprintf("%q: use \"AES256\", \"aws:kms\" or \"aws:kms:dsse\"", c.SSE))...)
	}
	if c.KMSKeyID != "" && !strings.HasPrefix(c.SSE, "aws:kms") {
		diags = append(diags, sdk.AttrError("sse_kms_key_id", "a KMS key without KMS encryption", `set server_side_encryption = "aws:kms" too`)...)
	}
	if diags.HasErrors() {
		return nil, diags
	}
	st, d := newStore(ctx, cc)
	diags = append(diags, d...)
	if d.HasErrors() {
		return nil, diags
	}
	return &Sink{st: st, c: c, lk: lk, sum: sum, pool: &bufPool{}}, diags
}

// Memory is what the sink buffers: concurrency parts per object in flight
// (objects of more than 10,000 parts get larger ones), and the buffers of
// their connections.
func (SinkType) Memory(cfg sdk.Config, streams int) int64 {
	var cc connConfig
	_ = cfg.Decode(&cc) // Configure reports a bad config; this is an estimate
	return memory(cc, streams)
}

// SmallObjectMemory is Memory for objects of at most maxObject bytes (a
// WAL archive's): one that fits a part goes up from one buffer of its own
// size.
func (SinkType) SmallObjectMemory(cfg sdk.Config, streams int, maxObject int64) int64 {
	var cc connConfig
	_ = cfg.Decode(&cc)
	return smallMemory(cc, streams, maxObject, true)
}

// Sink writes objects to a bucket.
type Sink struct {
	st   *store
	c    sinkConfig
	lk   objlock.Config
	sum  checksum
	pool *bufPool
}

// Close lets go of idle connections.
func (s *Sink) Close() error {
	s.st.client.Options().HTTPClient.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	return nil
}

// Create starts an object; nothing is sent before the first part is full
// (or Commit, for an object smaller than a part).
func (s *Sink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	if obj.Key == "" {
		return nil, fmt.Errorf("s3: empty object key for stream %q", obj.Stream)
	}
	if obj.Size > maxObject {
		return nil, fmt.Errorf("%s: %d bytes is more than S3's limit of 5 TiB per object: split the stream", s.st.url(obj.Key), obj.Size)
	}
	partSize := planPartSize(s.st.cfg.PartSize, obj.Size, obj.MaxSize)
	return newObjectWriter(ctx, s, obj, partSize), nil
}

// List returns the objects whose keys start with prefix.
func (s *Sink) List(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error) {
	return s.st.list(ctx, prefix)
}

// Open reads a committed object.
func (s *Sink) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.st.open(ctx, key)
}

// OpenRange reads part of a committed object (see sdk.RangeOpener).
func (s *Sink) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	return s.st.openRange(ctx, key, offset, length)
}

// Remove deletes an object; a missing object is no error. In a
// versioned store it deletes every version of it.
func (s *Sink) Remove(ctx context.Context, key string) error {
	if s.st.cfg.Versioned {
		return s.removeVersions(ctx, key)
	}
	_, err := s.st.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &s.st.bucket, Key: &key})
	if err != nil && !isNotFound(err) {
		return s.st.fail("removing", key, err)
	}
	return nil
}

func isNotFound(err error) bool {
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		}
	}
	return false
}

func isCode(err error, code string) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == code
}

var _ sdk.AfterLister = (*Sink)(nil)

// ListAfter returns up to limit objects under prefix whose keys sort
// after after: one ListObjectsV2 with StartAfter.
func (s *Sink) ListAfter(ctx context.Context, prefix, after string, limit int) ([]sdk.ObjectInfo, error) {
	if s.st.cfg.Versioned {
		return s.st.listChosen(ctx, prefix, after, limit)
	}
	out, err := s.st.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &s.st.bucket, Prefix: aws.String(prefix),
		StartAfter: aws.String(after), MaxKeys: aws.Int32(int32(min(limit, 1000)))})
	if err != nil {
		return nil, s.st.fail("listing", prefix, err)
	}
	infos := make([]sdk.ObjectInfo, 0, len(out.Contents))
	for _, o := range out.Contents {
		if k := aws.ToString(o.Key); k > after && len(infos) < limit {
			infos = append(infos, sdk.ObjectInfo{Key: k, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)})
		}
	}
	return infos, nil
}

// list returns the objects under prefix, sorted by key.
func (s *store) list(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error) {
	if s.cfg.Versioned {
		return s.listChosen(ctx, prefix, "", 0)
	}
	var out []sdk.ObjectInfo
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, s.fail("listing", prefix, err)
		}
		for _, o := range page.Contents {
			info := sdk.ObjectInfo{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size)}
			if o.LastModified != nil {
				info.Modified = *o.LastModified
			}
			out = append(out, info)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// planPartSize returns the part size for an object: the configured size,
// at least S3's minimum, raised (to a whole MiB) when the object's size —
// or, when that is not known, its bound — would otherwise need more than
// 10,000 parts, and at most S3's maximum.
func planPartSize(configured, size, maxSize int64) int64 {
	p := max(configured, minPartSize)
	n := size
	if n < 0 {
		n = maxSize
	}
	if n > 0 && (n+p-1)/p > maxParts {
		p = (n + maxParts - 1) / maxParts
		p = (p + mib - 1) / mib * mib
	}
	return min(p, maxPartSize)
}

// bufPool keeps part buffers for reuse across the objects of a sink, by
// size.
type bufPool struct {
	mu    sync.Mutex
	pools map[int64]*sync.Pool
}

func (p *bufPool) pool(size int64) *sync.Pool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pools == nil {
		p.pools = map[int64]*sync.Pool{}
	}
	sp, ok := p.pools[size]
	if !ok {
		sp = &sync.Pool{New: func() any { b := hugepage.Alloc(int(size))[:0]; return &b }}
		p.pools[size] = sp
	}
	return sp
}

func (p *bufPool) get(size int64) []byte { return (*p.pool(size).Get().(*[]byte))[:0] }

// put keeps b for reuse if it is a whole buffer of size bytes.
func (p *bufPool) put(b []byte, size int64) {
	if int64(cap(b)) != size {
		return
	}
	b = b[:0]
	p.pool(size).Put(&b)
}
