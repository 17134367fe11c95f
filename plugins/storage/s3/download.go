package s3

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/ranged"
)

// open reads the object at key with ranged GETs of part_size,
// concurrency of them in flight, handed out in order (see package
// ranged).
//
// The first range is requested at once: its answer says how large the
// object is (and for an object of one part it is all there is). The other
// ranges are asked only for the version read first (If-Match on its ETag),
// so an object replaced during a restore fails it instead of mixing two
// versions. The SDK retries failed requests itself; a body that breaks
// off is resumed from its first missing byte.
func (s *store) open(ctx context.Context, key string) (io.ReadCloser, error) {
	var etag string
	vid, err := s.version(ctx, key)
	if err != nil {
		return nil, err
	}
	var version *string
	if vid != "" {
		version = aws.String(vid) // as pipe wrote it (see lock.go)
		// Read once, mostly: a long-lived prefetcher must not remember
		// every segment it fetched. A second read looks the key up again.
		s.versions.forget(key)
	}
	get := func(ctx context.Context, off, n int64) (*s3.GetObjectOutput, error) {
		in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key, Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)), VersionId: version}
		if etag != "" {
			in.IfMatch = aws.String(etag)
		}
		return s.client.GetObject(ctx, in)
	}
	return ranged.Open(ctx, ranged.Options{
		Log:         sdk.Log().With("endpoint", "s3"),
		PartSize:    s.cfg.PartSize,
		Concurrency: s.cfg.Concurrency,
		Retries:     s.cfg.Retries,
		Explain:     func(op string, err error) error { return s.fail(op, key, err) },
		First: func(ctx context.Context, n int64) (ranged.Start, error) {
			out, err := get(ctx, 0, n)
			if err != nil {
				if isCode(err, "InvalidRange") {
					// An empty object has no byte 0.
					head, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key, VersionId: version})
					if herr == nil && aws.ToInt64(head.ContentLength) == 0 {
						return ranged.Start{}, nil
					}
				}
				return ranged.Start{}, err
			}
			etag = aws.ToString(out.ETag)
			size, ok := ranged.TotalSize(aws.ToString(out.ContentRange))
			if !ok {
				// The store ignored the range and sends the whole object.
				return ranged.Start{Body: out.Body, Whole: true}, nil
			}
			return ranged.Start{Size: size, Body: out.Body}, nil
		},
		Fetch: func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
			out, err := get(ctx, off, n)
			if err != nil {
				return nil, err
			}
			if out.Body == nil {
				return nil, errors.New("the store answered without a body")
			}
			return out.Body, nil
		},
	})
}

// openRange reads length bytes of the object at key from offset on, in
// one GET (a deduplicated chunk's blob; see sdk.RangeOpener).
func (s *store) openRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	vid, err := s.version(ctx, key)
	if err != nil {
		return nil, err
	}
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &key, Range: aws.String(fmt.Sprintf("bytes=%d-%d", offset, offset+length-1))}
	if vid != "" {
		in.VersionId = aws.String(vid)
		s.versions.forget(key)
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		return nil, s.fail("reading", key, err)
	}
	if out.Body == nil {
		return nil, s.fail("reading", key, errors.New("the store answered without a body"))
	}
	return out.Body, nil
}
