package s3

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// SourceType is the "s3" source.
type SourceType struct{}

var (
	_ sdk.SourceType      = SourceType{}
	_ sdk.MemoryEstimator = SourceType{}
	_ sdk.Source          = (*Source)(nil)
	_ io.Closer           = (*Source)(nil)
)

func (SourceType) Schema() sdk.Schema {
	return sdk.Schema{
		Storage:     true,
		Description: "Reads objects from an S3 bucket (AWS or an S3-compatible store): every object under a prefix (one stream per object, named by its key relative to the prefix, so a restore finds the backups' manifests there), or one object; each with parallel ranged GETs, reassembled in order.",
		Attributes: withConn([]sdk.Attribute{
			{Name: "prefix", Type: sdk.String, Public: true, Default: "", Description: `The folder to read, e.g. "pg/nightly/" ("pg/nightly" means the same); empty reads the whole bucket. A restore restores the newest backup whose manifest is under it.`},
			{Name: "key", Type: sdk.String, Public: true, Default: "", Description: "One object to read (relative to prefix, if set), e.g. a run's pipe-manifest.json to restore that run."},
			{Name: "part_size", Type: sdk.Size, Default: defaultPartSize, Profile: "part_size", Description: "The size of the ranges read in parallel (at least 1MiB)."},
			{Name: "concurrency", Type: sdk.Number, Default: int64(defaultConcurrency), Profile: "concurrency", Description: "Ranges of one object in flight at once: each stream buffers up to concurrency × part_size."},
		}),
	}
}

type sourceConfig struct {
	Prefix string `pipe:"prefix"`
	Key    string `pipe:"key"`
}

func (SourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	var c sourceConfig
	var cc connConfig
	diags := decodeConn(cfg, &c, &cc, minRangeSize)
	root, name := sourceRoot(c.Prefix, c.Key)
	if c.Key != "" && (name == "" || strings.HasSuffix(c.Key, "/")) {
		diags = append(diags, sdk.AttrError("key", "key names a folder", fmt.Sprintf("%q ends in \"/\": name one object, or use prefix for a folder", c.Key))...)
	}
	if diags.HasErrors() {
		return nil, diags
	}
	st, d := newStore(ctx, cc)
	diags = append(diags, d...)
	if d.HasErrors() {
		return nil, diags
	}
	return &Source{st: st, root: root, one: name}, diags
}

// sourceRoot returns the folder the source's stream names are relative
// to, and the name of its one object (if key is set).
func sourceRoot(prefix, key string) (root, name string) {
	root = strings.TrimPrefix(prefix, "/")
	if root != "" && !strings.HasSuffix(root, "/") {
		root += "/"
	}
	if key == "" {
		return root, ""
	}
	key = strings.TrimPrefix(key, "/")
	if prefix == "" {
		// Like a file for the fs source: the folder it is in is the root,
		// so a manifest's relative keys resolve beside it.
		i := strings.LastIndexByte(key, '/')
		return key[:i+1], key[i+1:]
	}
	return root, key
}

func (SourceType) Memory(cfg sdk.Config, streams int) int64 {
	var cc connConfig
	_ = cfg.Decode(&cc) // Configure reports a bad config; this is an estimate
	return memory(cc, streams)
}

// SmallObjectMemory is Memory for objects of at most maxObject bytes: the
// ranges such an object has, each no larger than it.
func (SourceType) SmallObjectMemory(cfg sdk.Config, streams int, maxObject int64) int64 {
	var cc connConfig
	_ = cfg.Decode(&cc)
	return smallMemory(cc, streams, maxObject, false)
}

// Source reads objects of a bucket.
type Source struct {
	st   *store
	root string // prefix of every key, "" or ending in "/"
	one  string // the one object's name, or ""
}

// Close lets go of idle connections.
func (s *Source) Close() error {
	s.st.client.Options().HTTPClient.(interface{ CloseIdleConnections() }).CloseIdleConnections()
	return nil
}

// Streams lists the objects under the prefix (folder markers left out),
// or the one object.
func (s *Source) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	if s.one != "" {
		key := s.root + s.one
		in := &s3.HeadObjectInput{Bucket: &s.st.bucket, Key: &key}
		vid, err := s.st.version(ctx, key)
		if err != nil {
			return nil, err
		}
		if vid != "" {
			in.VersionId = aws.String(vid)
		}
		out, err := s.st.client.HeadObject(ctx, in)
		if err != nil {
			return nil, s.st.fail("looking up", key, err)
		}
		return []sdk.StreamInfo{{Name: s.one, Size: aws.ToInt64(out.ContentLength)}}, nil
	}
	objs, err := s.st.list(ctx, s.root)
	if err != nil {
		return nil, err
	}
	var out []sdk.StreamInfo
	for _, o := range objs {
		if strings.HasSuffix(o.Key, "/") {
			continue // a folder marker of some consoles
		}
		out = append(out, sdk.StreamInfo{Name: o.Key[len(s.root):], Size: o.Size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("nothing in s3://%s/%s: check bucket and prefix (keys are case-sensitive)", s.st.bucket, s.root)
	}
	return out, nil
}

// Open reads a stream, or any object under the prefix.
func (s *Source) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := s.checkName(name); err != nil {
		return nil, err
	}
	return s.st.open(ctx, s.root+name)
}

// OpenRange reads part of an object under the source's folder (see
// sdk.RangeOpener).
func (s *Source) OpenRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	if err := s.checkName(name); err != nil {
		return nil, err
	}
	return s.st.openRange(ctx, s.root+name, offset, length)
}

// checkName says why name is no object name under the source's folder.
func (s *Source) checkName(name string) error {
	if name == "" || strings.HasPrefix(name, "/") {
		return fmt.Errorf("%q is not an object name under s3://%s/%s", name, s.st.bucket, s.root)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == ".." {
			return fmt.Errorf("%q points outside s3://%s/%s", name, s.st.bucket, s.root)
		}
	}
	return nil
}

var _ sdk.Selection = (*Source)(nil)

// Single reports whether key names one object (see sdk.Selection).
func (s *Source) Single() bool { return s.one != "" }
