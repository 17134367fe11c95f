package azure

import (
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/hugepage"
)

// uploadMetaKey marks a committed blob with the id of the writer that
// committed it, so a commit whose answer was lost can be recognised and
// taken back.
const uploadMetaKey = "pipeupload"

var errAborted = errors.New("aborted")

// blockWriter writes one blob. Bytes fill block buffers; a full block is
// staged by a goroutine of its own, at most concurrency at once, and Write
// blocks while every buffer is in flight (backpressure). While the object
// may still fit max_single_put_size its blocks are held instead, and sent
// in one Put Blob at Commit.
type blockWriter struct {
	s        *Sink
	where    string
	bb       *blockblob.Client
	bs       int64
	maxBuf   int
	uploadID string

	ctx    context.Context // Create's context; Abort and a failed block cancel it
	cancel context.CancelCauseFunc

	// Used by Write and Commit only (called one at a time).
	exclusive bool     // commit only if no blob is at the name (sdk.Object.Exclusive)
	locked    bool     // the blob gets an immutability policy (object_lock_days)
	single    bool     // the object may still go up in one Put Blob
	cur       []byte   // the block being filled
	held      [][]byte // full blocks held while single
	total     int64
	ids       []string // block ids, in order
	nbuf      int      // buffers allocated

	free chan []byte   // buffers whose block was staged
	sem  chan struct{} // blocks in flight

	op        sync.Mutex // held by Commit and Abort
	mu        sync.Mutex // guards the fields below and wg.Add
	wg        sync.WaitGroup
	err       error // the first failure of a block
	closed    bool  // Commit or Abort began
	aborted   bool
	committed bool
}

func newBlockWriter(ctx context.Context, s *Sink, obj sdk.Object, bs int64) *blockWriter {
	maxBuf := buffersPerObject(bs, s.conc, s.singlePut)
	wctx, cancel := context.WithCancelCause(ctx)
	w := &blockWriter{
		s: s, where: s.blobURL(obj.Key), bb: s.c.NewBlockBlobClient(obj.Key),
		bs: bs, maxBuf: maxBuf, uploadID: randomID(),
		ctx: wctx, cancel: cancel,
		single:    obj.Size < 0 || obj.Size <= s.singlePut,
		exclusive: obj.Exclusive,
		locked:    s.lk.Locks(obj.Key),
		free:      make(chan []byte, maxBuf),
		sem:       make(chan struct{}, s.conc),
	}
	return w
}

func randomID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// blockID names block i: the same length for every block of a blob, as the
// service requires, and unique to this writer.
func blockID(uploadID string, i int) string {
	return base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "%s%06d", uploadID, i))
}

// failure is why the object cannot be committed, or nil.
func (w *blockWriter) failure() error {
	w.mu.Lock()
	err := w.err
	w.mu.Unlock()
	if err != nil {
		return err
	}
	if cause := context.Cause(w.ctx); cause != nil {
		if errors.Is(cause, errAborted) {
			return fmt.Errorf("writing %s: the object was aborted", w.where)
		}
		return explain("writing", w.where, cause)
	}
	return nil
}

func (w *blockWriter) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.cancel(err)
}

func (w *blockWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	closed := w.closed
	w.mu.Unlock()
	if closed {
		return 0, fmt.Errorf("writing %s: the object was already committed or aborted", w.where)
	}
	if err := w.failure(); err != nil {
		return 0, err
	}
	written := 0
	for len(p) > 0 {
		if w.cur == nil {
			b, err := w.buffer(int64(len(p)))
			if err != nil {
				return written, err
			}
			w.cur = b
		}
		n := min(len(p), int(w.bs)-len(w.cur))
		w.cur = appendBounded(w.cur, p[:n], w.bs)
		p = p[n:]
		written += n
		w.total += int64(n)
		if int64(len(w.cur)) == w.bs {
			if w.single {
				w.held = append(w.held, w.cur)
			} else if err := w.submit(w.cur); err != nil {
				return written, err
			}
			w.cur = nil
		}
		if w.single && w.total > w.s.singlePut {
			if err := w.startStaging(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// appendBounded appends p to b, growing b's capacity by doubling but never
// beyond limit (append's own growth could overshoot the memory budget).
func appendBounded(b, p []byte, limit int64) []byte {
	if need := len(b) + len(p); need > cap(b) {
		c := int(min(limit, int64(max(need, 2*cap(b)))))
		nb := hugepage.Alloc(c)[:len(b)]
		copy(nb, b)
		b = nb
	}
	return append(b, p...)
}

// buffer returns an empty block buffer: a recycled one, a new one while
// fewer than maxBuf exist, or the next one a staged block frees.
func (w *blockWriter) buffer(hint int64) ([]byte, error) {
	select {
	case b := <-w.free:
		return b[:0], nil
	default:
	}
	if w.nbuf < w.maxBuf {
		w.nbuf++
		if b, ok := w.s.pool.Get().([]byte); ok && int64(cap(b)) == w.bs {
			return b[:0], nil
		}
		// Small objects (manifests, tiny files) start small.
		return hugepage.Alloc(int(min(w.bs, max(hint, 64*kib))))[:0], nil
	}
	if w.single {
		// Every buffer is held and more bytes come: the object is larger
		// than max_single_put_size.
		if err := w.startStaging(); err != nil {
			return nil, err
		}
	}
	select {
	case b := <-w.free:
		return b[:0], nil
	case <-w.ctx.Done():
		return nil, w.failure()
	}
}

// startStaging gives up on a single put: the held blocks go up now.
func (w *blockWriter) startStaging() error {
	w.single = false
	held := w.held
	w.held = nil
	for _, b := range held {
		if err := w.submit(b); err != nil {
			return err
		}
	}
	return nil
}

// submit stages buf as the next block, in the background.
func (w *blockWriter) submit(buf []byte) error {
	i := len(w.ids)
	if i >= maxBlocks {
		err := &opError{msg: fmt.Sprintf("writing %s: the object outgrew %d blocks of %s: raise block_size", w.where, maxBlocks, sdk.FormatSize(w.bs))}
		w.fail(err)
		return err
	}
	id := blockID(w.uploadID, i)
	w.ids = append(w.ids, id)
	w.mu.Lock()
	if w.aborted {
		w.mu.Unlock()
		return w.failure()
	}
	w.wg.Add(1)
	w.mu.Unlock()
	go w.stage(i, id, buf)
	return nil
}

func (w *blockWriter) stage(i int, id string, buf []byte) {
	defer w.wg.Done()
	defer w.release(buf)
	select {
	case w.sem <- struct{}{}:
	case <-w.ctx.Done():
		return
	}
	defer func() { <-w.sem }()
	sum := md5.Sum(buf)
	_, err := w.bb.StageBlock(w.ctx, id, newBody(buf), &blockblob.StageBlockOptions{
		TransactionalValidation: blob.TransferValidationTypeMD5(sum[:]),
	})
	if err != nil {
		w.fail(w.s.explain(fmt.Sprintf("staging block %d (%s) of", i+1, sdk.FormatSize(int64(len(buf)))), w.where, err))
	}
}

func (w *blockWriter) release(buf []byte) {
	select {
	case w.free <- buf:
	default:
	}
}

// Commit sends a held object in one Put Blob, or waits for the staged
// blocks and commits the block list. Only then does the blob exist.
func (w *blockWriter) Commit(ctx context.Context) error {
	w.op.Lock()
	defer w.op.Unlock()
	if done, err := w.closeForCommit(); done {
		return err
	}
	defer w.recycle()

	if err := w.failure(); err != nil {
		w.abort()
		return err
	}
	// The request ends with Commit's context or with the writer's.
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(w.ctx, func() { cancel(context.Cause(w.ctx)) })
	defer stop()

	meta, cond := w.commitOptions()
	var err error
	op := "committing the block list of"
	if w.single {
		op = "uploading"
		err = w.upload(cctx, meta, cond)
	} else {
		if err := w.stageRest(); err != nil {
			w.abort()
			return err
		}
		o := &blockblob.CommitBlockListOptions{Tier: w.s.tier, Metadata: meta, AccessConditions: cond}
		o.ImmutabilityPolicyMode, o.ImmutabilityPolicyExpiryTime = w.immutability()
		_, err = w.bb.CommitBlockList(cctx, w.ids, o)
	}
	return w.settle(cctx, op, err)
}

// closeForCommit closes the writer for Commit. done says Commit has
// nothing more to do but return err: the object was committed already
// (nil), or aborted.
func (w *blockWriter) closeForCommit() (done bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.committed {
		return true, nil
	}
	if w.aborted {
		return true, fmt.Errorf("committing %s: the object was aborted", w.where)
	}
	w.closed = true
	return false, nil
}

// commitOptions are the metadata and the access conditions the commit of
// the object sends.
func (w *blockWriter) commitOptions() (map[string]*string, *blob.AccessConditions) {
	meta := map[string]*string{uploadMetaKey: ptr(w.uploadID)}
	var cond *blob.AccessConditions
	if w.exclusive {
		// The service creates the blob only if none has the name.
		cond = &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfNoneMatch: ptr(azcore.ETagAny)}}
	}
	return meta, cond
}

// upload sends the held object in one Put Blob, with its MD5.
func (w *blockWriter) upload(ctx context.Context, meta map[string]*string, cond *blob.AccessConditions) error {
	blocks := w.held
	if len(w.cur) > 0 {
		blocks = append(blocks, w.cur)
	}
	h := md5.New()
	for _, b := range blocks {
		h.Write(b)
	}
	o := &blockblob.UploadOptions{
		TransactionalValidation: blob.TransferValidationTypeMD5(h.Sum(nil)),
		Tier:                    w.s.tier,
		Metadata:                meta,
		AccessConditions:        cond,
	}
	o.ImmutabilityPolicyMode, o.ImmutabilityPolicyExpiryTime = w.immutability()
	_, err := w.bb.Upload(ctx, newBody(blocks...), o)
	return err
}

// immutability is the immutability policy the blob is committed with
// (x-ms-immutability-policy-mode and -until-date), nil without a lock:
// set in the request that commits it, so the blob never exists unlocked.
func (w *blockWriter) immutability() (*blob.ImmutabilityPolicySetting, *time.Time) {
	if !w.locked {
		return nil, nil
	}
	mode := blob.ImmutabilityPolicySettingUnlocked
	if w.s.lk.Compliance() {
		mode = blob.ImmutabilityPolicySettingLocked
	}
	return &mode, ptr(w.s.lk.Until(time.Now()))
}

// stageRest stages the block being filled and waits for every staged
// block: the error is the first failure among them.
func (w *blockWriter) stageRest() error {
	if len(w.cur) > 0 {
		if err := w.submit(w.cur); err != nil {
			return err
		}
		w.cur = nil
	}
	w.wg.Wait()
	return w.failure()
}

// settle ends a commit whose request, op, returned err in ctx: it marks
// the object committed, or takes back what the request may have left and
// aborts the object.
func (w *blockWriter) settle(ctx context.Context, op string, err error) error {
	if err != nil && w.exclusive && bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
		if _, ours := w.ours(); !ours {
			w.abort()
			return fmt.Errorf("%s %w: the service refused to replace it (If-None-Match: *)", w.where, sdk.ErrExists)
		}
		// A retry of the commit whose answer was lost: the blob is ours.
		err = nil
	}
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(err, cause) {
			err = errors.Join(cause, err)
		}
		w.takeBack(err)
		w.abort()
		if errors.Is(err, errAborted) {
			return fmt.Errorf("committing %s: the object was aborted", w.where)
		}
		return w.s.explain(op, w.where, err)
	}
	w.mu.Lock()
	w.committed = true
	w.mu.Unlock()
	return nil
}

// takeBack deletes the blob when a commit failed in a way that leaves it
// unknown whether the service committed it (the connection broke, the
// context ended, the service failed): if the blob carries this writer's id,
// it is ours.
func (w *blockWriter) takeBack(err error) {
	var re *azcore.ResponseError
	if errors.As(err, &re) && isPermanent(re) {
		return // the service refused the commit: nothing was committed
	}
	etag, ours := w.ours()
	if !ours {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = w.bb.BlobClient().Delete(ctx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{
		ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: etag}}})
}

// ours reports whether the blob at the name carries this writer's id (a
// commit of it reached the service), and its ETag.
func (w *blockWriter) ours() (*azcore.ETag, bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	props, err := w.bb.BlobClient().GetProperties(ctx, nil)
	if err != nil {
		return nil, false
	}
	for k, v := range props.Metadata {
		if strings.EqualFold(k, uploadMetaKey) && v != nil && *v == w.uploadID {
			return props.ETag, true
		}
	}
	return nil, false
}

// Abort stops the blocks in flight and commits nothing. Staged blocks stay
// uncommitted, invisible to reads and lists; the service discards them
// with the next commit to that name or after a week.
func (w *blockWriter) Abort(ctx context.Context) error {
	w.cancel(errAborted) // first: a blocked Write or an in-flight Commit returns
	w.op.Lock()
	defer w.op.Unlock()
	w.mu.Lock()
	if w.committed {
		w.mu.Unlock()
		return nil
	}
	w.mu.Unlock()
	w.abort()
	w.recycle()
	return nil
}

func (w *blockWriter) abort() {
	w.mu.Lock()
	w.closed, w.aborted = true, true
	w.mu.Unlock()
	w.cancel(errAborted)
	w.wg.Wait()
}

// recycle returns the writer's full-size buffers to the sink's pool once
// no block is in flight.
func (w *blockWriter) recycle() {
	w.wg.Wait()
	for {
		select {
		case b := <-w.free:
			if int64(cap(b)) == w.bs {
				w.s.pool.Put(b[:0]) //nolint:staticcheck // a slice header is small next to the buffer
			}
		default:
			return
		}
	}
}

// segments reads a list of byte slices as one seekable body.
type segments struct {
	parts [][]byte
	size  int64
	off   int64
}

func newSegments(parts [][]byte) *segments {
	s := &segments{parts: parts}
	for _, p := range parts {
		s.size += int64(len(p))
	}
	return s
}

func (s *segments) Read(p []byte) (int, error) {
	if s.off >= s.size {
		return 0, io.EOF
	}
	n := 0
	off := s.off
	for _, part := range s.parts {
		if off >= int64(len(part)) {
			off -= int64(len(part))
			continue
		}
		k := copy(p[n:], part[off:])
		n += k
		off = 0
		if n == len(p) {
			break
		}
	}
	s.off += int64(n)
	return n, nil
}

func (s *segments) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = s.off + offset
	case io.SeekEnd:
		abs = s.size + offset
	default:
		return 0, errors.New("segments: invalid whence")
	}
	if abs < 0 {
		return 0, errors.New("segments: negative position")
	}
	s.off = abs
	return abs, nil
}

// body is a request body over buffers that are reused once the request
// is over. azcore closes it when the request (with its retries) ends; the
// HTTP transport may still hold it then, so after Close every Read fails
// instead of touching a buffer that holds the next block by now.
type body struct {
	mu     sync.Mutex
	s      *segments
	closed bool
}

func newBody(parts ...[]byte) *body { return &body{s: newSegments(parts)} }

func (b *body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return 0, errors.New("request body read after its request ended")
	}
	return b.s.Read(p)
}

func (b *body) Seek(offset int64, whence int) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.s.Seek(offset, whence)
}

func (b *body) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	return nil
}
