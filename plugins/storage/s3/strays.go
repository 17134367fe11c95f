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
	"github.com/aws/smithy-go/middleware"

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

// strayWait is how long the listing must stay empty after a create that
// failed: its lost request may still be on its way to the store.
const strayWait = time.Second

// mayHaveStrays reports whether the create that returned out and err may
// have left an upload behind: it failed other than by the store's refusal,
// or it took more than one attempt.
func mayHaveStrays(meta middleware.Metadata, err error) bool {
	if err != nil {
		var re *awshttp.ResponseError
		if errors.As(err, &re) {
			s := re.HTTPStatusCode()
			return !(s >= 400 && s < 500 && s != 408 && s != 429)
		}
		return true
	}
	r, ok := retry.GetAttemptResults(meta)
	return ok && len(r.Results) > 1
}

// abortStrays aborts every multipart upload of the key but keep (the
// writer's own, committed; "" after it was aborted). With settle, it
// lists again until a listing strayWait after the last abort finds none,
// for a request still in flight. It retries for abortTimeout while the
// store is out of reach.
func (w *objectWriter) abortStrays(keep string, settle bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	wait := 200 * time.Millisecond
	quiet := time.Time{} // when the listing was last found empty after an abort
	for {
		ids, err := w.uploadsOf(ctx)
		if err == nil {
			for _, id := range ids {
				if id == keep {
					continue
				}
				_, aerr := w.st.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &w.st.bucket, Key: &w.key, UploadId: aws.String(id)})
				if aerr != nil && !isCode(aerr, "NoSuchUpload") {
					err = w.st.fail("aborting the stray multipart upload "+id+" of", w.key, aerr)
					break
				}
				sdk.Log().Info("aborted a multipart upload whose start was not answered", "endpoint", "s3", "object", w.st.url(w.key), "upload_id", id)
				quiet = time.Time{}
			}
		}
		if err == nil {
			if !settle {
				return nil
			}
			if quiet.IsZero() {
				quiet = time.Now()
			} else if time.Since(quiet) >= strayWait {
				return nil
			}
			wait = strayWait
		}
		select {
		case <-ctx.Done():
			if err == nil {
				return nil
			}
			return fmt.Errorf("%w; a multipart upload whose start was not answered may stay in the bucket: add a lifecycle rule that aborts incomplete multipart uploads after a day", err)
		case <-time.After(wait):
		}
		if err != nil {
			wait = min(2*wait, 5*time.Second)
		}
	}
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
