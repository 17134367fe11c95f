package azure

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/ranged"
)

// retryDelay is the first wait before a range whose transfer broke off
// without progress is asked for again; it doubles per attempt up to
// maxRetryDelay. (azcore retries failed requests itself.)
var (
	retryDelay    = time.Second
	maxRetryDelay = 30 * time.Second
)

// openBlob reads a blob with parallel ranged GETs of block_size,
// concurrency of them in flight, handed out in order (see package
// ranged). The first range's answer gives the blob's size and ETag; every
// other range is pinned to that ETag, so a blob replaced mid-read fails
// instead of mixing two versions.
func openBlob(ctx context.Context, cl *client, key string) (io.ReadCloser, error) {
	where := cl.where + "/" + key
	if err := checkBlobName(key); err != nil {
		return nil, fmt.Errorf("reading %s: %w", where, err)
	}
	bc := cl.c.NewBlobClient(key)
	var etag azcore.ETag
	get := func(ctx context.Context, off, n int64) (blob.DownloadStreamResponse, error) {
		o := &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: off, Count: n}}
		if etag != "" {
			o.AccessConditions = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}
		}
		return bc.DownloadStream(ctx, o)
	}
	return ranged.Open(ctx, ranged.Options{
		Log:         sdk.Log().With("endpoint", "azure"),
		PartSize:    cl.blockSize,
		Concurrency: cl.conc,
		Retries:     cl.retries,
		Backoff:     ranged.Backoff(retryDelay, maxRetryDelay),
		Explain:     func(op string, err error) error { return explain(op, where, err) },
		First: func(ctx context.Context, n int64) (ranged.Start, error) {
			resp, err := get(ctx, 0, n)
			if err != nil {
				if bloberror.HasCode(err, bloberror.InvalidRange) {
					// An empty blob has no byte 0 to start a range at.
					props, perr := bc.GetProperties(ctx, nil)
					if perr == nil && props.ContentLength != nil && *props.ContentLength == 0 {
						return ranged.Start{}, nil
					}
				}
				return ranged.Start{}, err
			}
			if resp.ETag != nil {
				etag = *resp.ETag
			}
			if resp.ContentRange == nil {
				// A whole-blob answer: the range was ignored.
				return ranged.Start{Body: resp.Body, Whole: true}, nil
			}
			size, ok := ranged.TotalSize(*resp.ContentRange)
			if !ok {
				resp.Body.Close()
				return ranged.Start{}, fmt.Errorf("the service answered with Content-Range %q, which has no size", *resp.ContentRange)
			}
			return ranged.Start{Size: size, Body: resp.Body}, nil
		},
		Fetch: func(ctx context.Context, off, n int64) (io.ReadCloser, error) {
			resp, err := get(ctx, off, n)
			if err != nil {
				return nil, err
			}
			return resp.Body, nil
		},
	})
}

// openBlobRange reads length bytes of the blob at key from offset on, in
// one request (a deduplicated chunk's blob; see sdk.RangeOpener).
func openBlobRange(ctx context.Context, cl *client, key string, offset, length int64) (io.ReadCloser, error) {
	where := cl.where + "/" + key
	if err := checkBlobName(key); err != nil {
		return nil, fmt.Errorf("reading %s: %w", where, err)
	}
	resp, err := cl.c.NewBlobClient(key).DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: offset, Count: length}})
	if err != nil {
		return nil, explain("reading", where, err)
	}
	return resp.Body, nil
}
