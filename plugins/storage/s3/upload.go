package s3

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/cenkalti/backoff/v4"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/hugepage"
)

// How long cleaning up may take once an object failed: its multipart
// upload is aborted even when the run's context is gone, and retried for
// a while when the store is briefly out of reach (its parts would be
// billed until a lifecycle rule removes them).
const (
	abortTimeout  = time.Minute
	createTimeout = 2 * time.Minute
)

var errAborted = errors.New("the object was aborted")

type writerState int

const (
	writing writerState = iota
	committed
	aborted
)

// objectWriter uploads one object. Bytes fill a part buffer; a full part
// goes up in the background as soon as more bytes arrive (so that an object
// of exactly one part is one PutObject), while the next fills. At most
// concurrency buffers exist: when all are in flight, Write waits, which is
// the backpressure. The multipart upload starts with the second part and is
// completed only by Commit.
type objectWriter struct {
	s        *Sink
	st       *store
	key      string
	hint     int64 // the object's size, or its bound, or -1
	partSize int64

	// ctx ends when the object fails, is aborted, or Create's context
	// ends; its cause is the first failure.
	ctx       context.Context
	cancel    context.CancelCauseFunc
	stopWatch func() bool

	// lock is held by Write, Commit and Abort: Abort (which may come while
	// a Write waits) cancels ctx first, so the Write returns and lets it in.
	lock     sync.Mutex
	state    writerState
	abortErr error
	buf      []byte // the part being filled
	bufs     int    // part buffers this object holds
	free     chan []byte
	sums     *runningSums // of the first part, as it fills; nil when it needs none or the object is known to be larger
	written  int64
	uploadID string
	strays   bool  // a start of the upload went unanswered: see abortStrays
	next     int32 // parts started
	parts    sync.WaitGroup

	fromFile  bool // ReadAtFrom sent every part: Commit only completes
	exclusive bool // commit only if no object is at key (sdk.Object.Exclusive)
	// id marks an exclusive object (metadata uploadMetaKey) so that a
	// commit whose answer was lost, retried and refused is recognised as
	// this writer's.
	id string

	mu   sync.Mutex // guards what part uploads report
	done []types.CompletedPart
	err  error
}

func newObjectWriter(ctx context.Context, s *Sink, obj sdk.Object, partSize int64) *objectWriter {
	hint := obj.Size
	if hint < 0 {
		hint = obj.MaxSize
	}
	wctx, cancel := context.WithCancelCause(ctx)
	w := &objectWriter{s: s, st: s.st, key: obj.Key, hint: hint, partSize: partSize,
		ctx: wctx, cancel: cancel, free: make(chan []byte, s.st.cfg.Concurrency), exclusive: obj.Exclusive}
	if obj.Exclusive {
		w.id = uploadID()
	}
	if obj.Size <= partSize { // unknown (-1) or one part: it may go up in one PutObject
		w.sums = s.sum.running(s.st.signed)
	}
	// However the object ends before Commit — a failed part, Abort, or the
	// run's context — its multipart upload is aborted.
	w.stopWatch = context.AfterFunc(wctx, func() { w.Abort(context.Background()) })
	return w
}

// failure is why the object cannot go on, or nil.
func (w *objectWriter) failure() error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if w.ctx.Err() != nil {
		cause := context.Cause(w.ctx)
		if errors.Is(cause, errAborted) {
			return fmt.Errorf("%s: %w", w.st.url(w.key), cause)
		}
		return w.st.fail("uploading", w.key, cause)
	}
	return nil
}

func (w *objectWriter) Write(p []byte) (int, error) {
	w.lock.Lock()
	defer w.lock.Unlock()
	if w.state != writing {
		w.mu.Lock()
		failed := w.err
		w.mu.Unlock()
		if w.state == aborted && failed != nil {
			return 0, failed // a part that failed aborted the upload: that is why
		}
		return 0, fmt.Errorf("%s: write after the object was %s", w.st.url(w.key), map[writerState]string{committed: "committed", aborted: "aborted"}[w.state])
	}
	if err := w.failure(); err != nil {
		return 0, err
	}
	n := 0
	for len(p) > 0 {
		if int64(len(w.buf)) == w.partSize {
			// A full part, and more is coming: it goes up.
			if err := w.flush(); err != nil {
				return n, err
			}
		}
		if w.buf == nil {
			b, err := w.buffer()
			if err != nil {
				return n, err
			}
			w.buf = b
		}
		k := min(len(p), int(w.partSize)-len(w.buf))
		if len(w.buf)+k > cap(w.buf) {
			w.buf = w.grow(w.buf)
		}
		k = min(k, cap(w.buf)-len(w.buf))
		w.buf = append(w.buf, p[:k]...)
		if w.sums != nil {
			w.sums.write(p[:k])
		}
		p = p[k:]
		n += k
		w.written += int64(k)
	}
	return n, nil
}

// buffer returns an empty part buffer, waiting while all of them are in
// flight.
func (w *objectWriter) buffer() ([]byte, error) {
	select {
	case b := <-w.free:
		return b[:0], nil
	default:
	}
	if w.bufs == 0 && w.hint >= 0 && w.hint < w.partSize {
		// A small object: no more than it needs (it may still grow).
		w.bufs++
		return hugepage.Alloc(int(w.hint))[:0], nil
	}
	if w.bufs == 0 && w.hint < 0 {
		// Unknown size: grow the first part as the bytes come, so small
		// streams (manifests, say) do not take a whole part each.
		w.bufs++
		return make([]byte, 0, min(w.partSize, mib)), nil
	}
	if w.bufs < w.st.cfg.Concurrency {
		w.bufs++
		return w.s.pool.get(w.partSize), nil
	}
	select {
	case b := <-w.free:
		return b[:0], nil
	case <-w.ctx.Done():
		return nil, w.failure()
	}
}

// grow moves a part that outgrew its buffer (the first part of a stream of
// unknown size, which starts small) into a larger one: twice as large while
// that is under a quarter of a part, then a whole part from the sink's
// pool, which the parts after it reuse. append's own growth (1.25× at these
// sizes) copied a 64 MiB part some twenty times, allocating ~5 parts' worth
// of fresh memory.
func (w *objectWriter) grow(b []byte) []byte {
	var nb []byte
	if next := max(2*int64(cap(b)), 64<<10); next < w.partSize/4 {
		nb = make([]byte, 0, next)
	} else {
		nb = w.s.pool.get(w.partSize)
	}
	return append(nb, b...)
}

// flush starts the upload of the full part in buf.
func (w *objectWriter) flush() error {
	if w.uploadID == "" {
		if err := w.create(); err != nil {
			return err
		}
	}
	if w.next >= maxParts {
		err := fmt.Errorf("%s: the stream needs more than %d parts of %s (its size was not known in advance): set part_size larger, e.g. %q", w.st.url(w.key), maxParts, sdk.FormatSize(w.partSize), sdk.FormatSize(w.partSize*4))
		w.cancel(err)
		return err
	}
	w.next++
	b, sums := w.buf, w.sums
	w.buf, w.sums = nil, nil // the next parts are summed as they go up
	w.parts.Add(1)
	go w.uploadPart(w.next, b, sums)
	return nil
}

// create starts the multipart upload. Its request does not stop when the
// object is aborted meanwhile: the upload's id must be known to abort it.
func (w *objectWriter) create() error {
	if err := w.failure(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), createTimeout)
	defer cancel()
	in := &s3.CreateMultipartUploadInput{Bucket: &w.st.bucket, Key: &w.key}
	if w.exclusive {
		in.Metadata = map[string]string{uploadMetaKey: w.id}
	}
	if w.s.sum.enabled() {
		in.ChecksumAlgorithm = w.s.sum.algo
	}
	w.s.options(&in.StorageClass, &in.ServerSideEncryption, &in.SSEKMSKeyId)
	w.s.lock(w.key, &in.ObjectLockMode, &in.ObjectLockRetainUntilDate)
	out, err := w.st.client.CreateMultipartUpload(ctx, in)
	w.strays = w.strays || mayHaveStrays(out, err)
	if err != nil {
		err = w.st.fail("starting the upload of", w.key, err)
		w.cancel(err)
		return err
	}
	w.uploadID = aws.ToString(out.UploadId)
	return w.failure() // aborted meanwhile: Abort sees the id
}

// uploadPart sends part num; sums, if not nil, were computed as it filled.
func (w *objectWriter) uploadPart(num int32, b []byte, sums *runningSums) {
	defer w.parts.Done()
	if sums == nil || sums.n != len(b) {
		sums = w.s.sum.of(b, w.st.signed)
	}
	err := w.sendPart(num, bytes.NewReader(b), int64(len(b)), sums)
	w.free <- b // never blocks: it has room for every buffer
	if err != nil {
		w.partFailed(num, err)
	}
}

// sendPart sends part num, n bytes of body summed in sums, and keeps it
// for the completion.
func (w *objectWriter) sendPart(num int32, body io.ReadSeeker, n int64, sums *runningSums) error {
	in := &s3.UploadPartInput{Bucket: &w.st.bucket, Key: &w.key, UploadId: &w.uploadID, PartNumber: aws.Int32(num),
		Body: body, ContentLength: aws.Int64(n)}
	part, opts := sums.part(in)
	out, err := w.st.client.UploadPart(w.ctx, in, opts...)
	if err != nil {
		return err
	}
	part.ETag = out.ETag
	w.mu.Lock()
	w.done = append(w.done, part)
	w.mu.Unlock()
	return nil
}

// partFailed makes part num's failure the object's, which stops it,
// unless the object failed or ended already. A file that could not be
// read (sdk.ReadError) stays the file's failure, not the store's.
func (w *objectWriter) partFailed(num int32, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || w.ctx.Err() != nil {
		return
	}
	if re := (*sdk.ReadError)(nil); errors.As(err, &re) {
		w.err = re
	} else {
		w.err = w.st.fail(fmt.Sprintf("uploading part %d of", num), w.key, err)
	}
	w.cancel(w.err)
}

// ReadAtFrom takes the whole object from r (see sdk.ReaderAtFrom). An
// object of one part is read into its buffer and summed now, and Commit
// sends it in one PutObject, as a written one. A larger one goes up as a
// multipart upload of sections of r, concurrency of them at once, each
// read twice (summed, then sent); it returns when every part is up, and
// Commit completes the upload. A failure, or Abort meanwhile, stops the
// parts, and the object is aborted as after a failed Write.
func (w *objectWriter) ReadAtFrom(r io.ReaderAt, size int64, progress func(int64)) (int64, error) {
	w.lock.Lock()
	defer w.lock.Unlock()
	if w.state != writing || w.written > 0 || w.buf != nil || w.next > 0 {
		return 0, fmt.Errorf("%s: ReadAtFrom after the object was written to", w.st.url(w.key))
	}
	if err := w.failure(); err != nil {
		return 0, err
	}
	if progress == nil {
		progress = func(int64) {}
	}
	if size <= w.partSize {
		// One part: read into its buffer as a written one is (Commit
		// sends it, and the file may be closed by then), summed as it
		// fills.
		b, err := w.buffer()
		if err != nil {
			return 0, err
		}
		if int64(cap(b)) < size {
			b = hugepage.Alloc(int(size))
		}
		b = b[:size]
		if k, err := r.ReadAt(b, 0); err != nil && !(err == io.EOF && int64(k) == size) {
			w.buf = b[:0]
			if err == io.EOF {
				err = shrank(int64(k), size)
			}
			return 0, err
		}
		w.buf, w.sums, w.written = b, w.s.sum.of(b, w.st.signed), size
		progress(size)
		return size, nil
	}
	parts := (size + w.partSize - 1) / w.partSize
	if parts > maxParts {
		return 0, fmt.Errorf("%s: %s needs more than %d parts of %s: set part_size larger, e.g. %q", w.st.url(w.key), sdk.FormatSize(size), maxParts, sdk.FormatSize(w.partSize), sdk.FormatSize((size+maxParts-1)/maxParts))
	}
	if err := w.create(); err != nil {
		return 0, err
	}
	slots := make(chan struct{}, w.st.cfg.Concurrency)
	for off := int64(0); off < size; off += w.partSize {
		select {
		case slots <- struct{}{}:
		case <-w.ctx.Done():
		}
		if w.ctx.Err() != nil {
			break
		}
		w.next++
		w.parts.Add(1)
		go func(num int32, off, n int64) {
			defer func() { <-slots }()
			w.uploadSection(num, r, off, n, progress)
		}(w.next, off, min(w.partSize, size-off))
	}
	w.parts.Wait()
	if err := w.failure(); err != nil {
		return 0, err
	}
	w.written, w.fromFile = size, true
	return size, nil
}

// shrank is the error of a file that ended at byte at, before its size.
func shrank(at, size int64) error {
	return &sdk.ReadError{Err: fmt.Errorf("the file ended at byte %d, before its %d bytes: it shrank while it was read", at, size)}
}

// sumSection feeds n bytes of r from off to sums (nil: nothing to sum),
// until ctx ends.
func sumSection(ctx context.Context, sums *runningSums, r io.ReaderAt, off, n int64) error {
	if sums == nil {
		return nil
	}
	buf := make([]byte, min(n, mib))
	for done := int64(0); done < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		k, err := r.ReadAt(buf[:min(int64(len(buf)), n-done)], off+done)
		sums.write(buf[:k])
		done += int64(k)
		if err != nil && done < n {
			if err == io.EOF {
				err = shrank(off+done, off+n)
			}
			return err
		}
	}
	return nil
}

// uploadSection sends n bytes of r from off as part num.
func (w *objectWriter) uploadSection(num int32, r io.ReaderAt, off, n int64, progress func(int64)) {
	defer w.parts.Done()
	sums := w.s.sum.running(w.st.signed)
	err := sumSection(w.ctx, sums, r, off, n)
	if err == nil {
		err = w.sendPart(num, io.NewSectionReader(r, off, n), n, sums)
	}
	if err != nil {
		w.partFailed(num, err)
		return
	}
	progress(n)
}

// Commit uploads what is left and completes the upload; on any failure
// it aborts the object.
func (w *objectWriter) Commit(ctx context.Context) error {
	w.lock.Lock()
	defer w.lock.Unlock()
	switch w.state {
	case committed:
		return nil
	case aborted:
		return fmt.Errorf("%s: not committing: %w", w.st.url(w.key), errAborted)
	}
	if err := w.failure(); err != nil {
		w.abortLocked()
		return fmt.Errorf("not committing: %w", err)
	}
	// Commit's own context can stop it too.
	cctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	var err error
	if w.uploadID == "" {
		err = w.put(cctx)
	} else {
		err = w.complete(cctx)
	}
	if err != nil {
		w.abortLocked()
		return err
	}
	w.state = committed
	w.stopWatch()
	w.cancel(nil)
	w.release()
	if w.strays {
		// The object is in place; a stray only costs storage.
		if err := w.abortStrays(w.uploadID, false); err != nil {
			sdk.Log().Warn("committed, but a stray multipart upload may remain", "endpoint", "s3", "object", w.st.url(w.key), "error", err.Error())
		}
	}
	return nil
}

// put sends an object smaller than a part in one request.
func (w *objectWriter) put(ctx context.Context) error {
	in := &s3.PutObjectInput{Bucket: &w.st.bucket, Key: &w.key, Body: bytes.NewReader(w.buf), ContentLength: aws.Int64(int64(len(w.buf)))}
	sums := w.sums
	if sums == nil || sums.n != len(w.buf) {
		sums = w.s.sum.of(w.buf, w.st.signed)
	}
	opts := sums.put(in)
	w.s.options(&in.StorageClass, &in.ServerSideEncryption, &in.SSEKMSKeyId)
	w.s.lock(w.key, &in.ObjectLockMode, &in.ObjectLockRetainUntilDate)
	if w.exclusive {
		in.IfNoneMatch = aws.String("*")
		in.Metadata = map[string]string{uploadMetaKey: w.id}
	}
	err := w.conditional(ctx, func() error {
		in.Body = bytes.NewReader(w.buf)
		_, err := w.st.client.PutObject(ctx, in, opts...)
		return err
	})
	if err != nil {
		return w.st.fail("uploading", w.key, err)
	}
	return nil
}

// conditional runs a request that creates the object (a PutObject, a
// CompleteMultipartUpload). Without exclusive it runs it once. With it,
// the request carries If-None-Match: * and the store decides: an object
// at the key already is sdk.ErrExists, and a conflict with a concurrent
// conditional request on the key (409 ConditionalRequestConflict, which
// AWS asks to retry) is tried again, when one of the two has won.
func (w *objectWriter) conditional(ctx context.Context, req func() error) error {
	if !w.exclusive {
		return req()
	}
	for attempt := 1; ; attempt++ {
		err := req()
		switch {
		case isCode(err, "PreconditionFailed") && w.ours(ctx):
			return nil // a retry of a request whose answer was lost: the object is this writer's
		case isCode(err, "PreconditionFailed"):
			return fmt.Errorf("an object %w there: the store refused to replace it (If-None-Match: *)", sdk.ErrExists)
		case isCode(err, "NotImplemented"):
			return errors.New("the store does not support conditional writes (If-None-Match: *), which pipe needs here so that two writers never store different objects under one name (a WAL archive): use a store that supports them (AWS S3, MinIO, Cloudflare R2, …)")
		case isCode(err, "ConditionalRequestConflict") && attempt < 5:
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 50 * time.Millisecond):
			}
			continue
		}
		return err
	}
}

// complete uploads the last part, waits for all, and completes the upload.
func (w *objectWriter) complete(ctx context.Context) error {
	if !w.fromFile {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.parts.Wait()
	if err := w.failure(); err != nil {
		return err
	}
	sort.Slice(w.done, func(i, j int) bool { return *w.done[i].PartNumber < *w.done[j].PartNumber })
	if len(w.done) != int(w.next) {
		return fmt.Errorf("%s: %d of %d parts uploaded", w.st.url(w.key), len(w.done), w.next)
	}
	in := &s3.CompleteMultipartUploadInput{Bucket: &w.st.bucket, Key: &w.key, UploadId: &w.uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: w.done}}
	if w.exclusive {
		in.IfNoneMatch = aws.String("*")
	}
	err := w.conditional(ctx, func() error {
		_, err := w.st.client.CompleteMultipartUpload(ctx, in)
		return err
	})
	if errors.Is(err, sdk.ErrExists) {
		return err
	}
	if err != nil && isCode(err, "NoSuchUpload") && w.landed(ctx) {
		// A retry of a completion whose answer was lost: the first one
		// did it.
		return nil
	}
	if err != nil {
		return w.st.fail("completing the upload of", w.key, err)
	}
	return nil
}

// uploadID is a random id that marks one writer's object.
func uploadID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// uploadMetaKey is the metadata entry that tells an exclusive object's
// writer from any other.
const uploadMetaKey = "pipe-upload"

// ours reports whether the object at the key is this writer's, whole.
func (w *objectWriter) ours(ctx context.Context) bool {
	out, err := w.st.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &w.st.bucket, Key: &w.key})
	return err == nil && out.Metadata[uploadMetaKey] == w.id && aws.ToInt64(out.ContentLength) == w.written
}

// landed reports whether the object is in place with every byte written.
func (w *objectWriter) landed(ctx context.Context) bool {
	out, err := w.st.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &w.st.bucket, Key: &w.key})
	return err == nil && aws.ToInt64(out.ContentLength) == w.written && out.LastModified != nil
}

// Abort stops the part uploads and aborts the multipart upload. It may be
// called while a Write waits; after Commit it does nothing.
func (w *objectWriter) Abort(ctx context.Context) error {
	if !w.lock.TryLock() {
		// A Write holds the lock, maybe waiting for a part: stop it.
		w.cancel(errAborted)
		w.lock.Lock()
	}
	defer w.lock.Unlock()
	return w.abortLocked()
}

func (w *objectWriter) abortLocked() error {
	switch w.state {
	case committed:
		return nil
	case aborted:
		return w.abortErr
	}
	w.state = aborted
	w.stopWatch()
	w.cancel(errAborted)
	w.parts.Wait()
	w.release()
	if w.uploadID != "" {
		w.abortErr = w.abortUpload()
	}
	if w.strays {
		w.abortErr = errors.Join(w.abortErr, w.abortStrays("", w.uploadID == ""))
	}
	return w.abortErr
}

// abortUpload aborts the multipart upload, retrying for a while: its
// parts cost storage until then.
func (w *objectWriter) abortUpload() error {
	ctx, cancel := context.WithTimeout(context.Background(), abortTimeout)
	defer cancel()
	if err := retryCleanup(ctx, func() error { return w.abortID(ctx, w.uploadID) }); err != nil {
		return fmt.Errorf("%w; its parts stay in the bucket until removed: add a lifecycle rule that aborts incomplete multipart uploads after a day",
			w.st.fail("aborting the multipart upload "+w.uploadID+" of", w.key, err))
	}
	return nil
}

// abortID aborts the key's multipart upload id; one already gone is no
// error.
func (w *objectWriter) abortID(ctx context.Context, id string) error {
	_, err := w.st.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &w.st.bucket, Key: &w.key, UploadId: aws.String(id)})
	if isCode(err, "NoSuchUpload") {
		return nil
	}
	return err
}

// retryCleanup runs op, a clean-up after a failure (an abort, a listing),
// until it succeeds or ctx ends, 200 ms apart, doubling to at most 5 s; it
// returns op's last error.
func retryCleanup(ctx context.Context, op func() error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.Multiplier, b.RandomizationFactor = 200*time.Millisecond, 2, 0
	b.MaxInterval, b.MaxElapsedTime = 5*time.Second, 0 // ctx bounds it
	var last error
	if backoff.Retry(func() error { last = op(); return last }, backoff.WithContext(b, ctx)) == nil {
		return nil
	}
	return last
}

// release gives the part buffers back for other objects.
func (w *objectWriter) release() {
	for {
		select {
		case b := <-w.free:
			w.s.pool.put(b, w.partSize)
			continue
		default:
		}
		break
	}
	if w.buf != nil {
		w.s.pool.put(w.buf, w.partSize)
		w.buf = nil
	}
}

// options applies the sink's storage class and encryption.
func (s *Sink) options(class *types.StorageClass, sse *types.ServerSideEncryption, kms **string) {
	if s.c.StorageClass != "" {
		*class = types.StorageClass(s.c.StorageClass)
	}
	if s.c.SSE != "" {
		*sse = types.ServerSideEncryption(s.c.SSE)
	}
	if s.c.KMSKeyID != "" {
		*kms = aws.String(s.c.KMSKeyID)
	}
}
