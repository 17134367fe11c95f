package s3

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// A CreateMultipartUpload whose answer was lost (a timeout, a connection
// reset) may still have started an upload on the store: pipe never learns
// its id, and its parts would be billed until a lifecycle rule removes
// them. The SDK's retry then starts another. Such strays are found by
// listing the key's multipart uploads: pipe writes a key from one writer
// at a time (a run's objects carry its id; PostgreSQL archives one WAL
// file at a time and pipe's pushers share the spool's lock; the catalog's
// index is smaller than a part, one PutObject), so every upload of the
// key but the writer's own is one.

// strayWait is how long after a listing that aborted strays (or after the
// first) a failed create's uploads are listed again: its lost request may
// still be on its way to the store.
const strayWait = time.Second

// mayHaveStrays reports whether the create that returned out and err may
// have left an upload behind: it failed other than by the store's refusal,
// or it took more than one attempt.
func mayHaveStrays(out *s3.CreateMultipartUploadOutput, err error) bool {
	if err != nil {
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			s := re.HTTPStatusCode()
			return !(s >= 400 && s < 500 && s != 408 && s != 429)
		}
		return true
	}
	r, ok := retry.GetAttemptResults(out.ResultMetadata)
	return ok && len(r.Results) > 1
}

// abortStrays aborts every multipart upload of the key but keep (the
// writer's own, committed; "" after it was aborted). With settle, it
// lists again every strayWait until a listing finds none, for a request
// still in flight. Each listing is retried while the store is out of
// reach; all of it ends after abortTimeout.
func (w *objectWriter) abortStrays(keep string, settle bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	for first := true; ; first = false {
		aborted := 0
		err := retryCleanup(ctx, func() (err error) {
			aborted, err = w.abortOthers(ctx, keep)
			return err
		})
		if err != nil {
			return fmt.Errorf("%w; a multipart upload whose start was not answered may stay in the bucket: add a lifecycle rule that aborts incomplete multipart uploads after a day", err)
		}
		if !settle || (!first && aborted == 0) {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(strayWait):
		}
	}
}

// abortOthers lists the key's multipart uploads and aborts those but keep;
// it returns how many it aborted.
func (w *objectWriter) abortOthers(ctx context.Context, keep string) (int, error) {
	ids, err := w.uploadsOf(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, id := range ids {
		if id == keep {
			continue
		}
		if err := w.abortID(ctx, id); err != nil {
			return n, w.st.fail("aborting the stray multipart upload "+id+" of", w.key, err)
		}
		sdk.Log().Info("aborted a multipart upload whose start was not answered", "endpoint", "s3", "object", w.st.url(w.key), "upload_id", id)
		n++
	}
	return n, nil
}

// uploadsOf lists the ids of the key's multipart uploads.
func (w *objectWriter) uploadsOf(ctx context.Context) ([]string, error) {
	var ids []string
	in := &s3.ListMultipartUploadsInput{Bucket: &w.st.bucket, Prefix: &w.key}
	for {
		out, err := w.st.client.ListMultipartUploads(ctx, in)
		if err != nil {
			return nil, w.st.fail("listing the multipart uploads of", w.key, err)
		}
		for _, u := range out.Uploads {
			if aws.ToString(u.Key) == w.key {
				ids = append(ids, aws.ToString(u.UploadId))
			}
		}
		if !aws.ToBool(out.IsTruncated) || out.NextKeyMarker == nil {
			return ids, nil
		}
		in.KeyMarker, in.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}
