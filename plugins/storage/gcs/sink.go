package gcs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/iterator"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/objlock"
)

// SinkType is the "gcs" sink.
type SinkType struct{}

var (
	_ sdk.SinkType        = SinkType{}
	_ sdk.MemoryEstimator = SinkType{}
	_ sdk.Sink            = (*Sink)(nil)
	_ sdk.Storage         = (*Sink)(nil)
	_ io.Closer           = (*Sink)(nil)
)

// uploadIDKey is the metadata entry that tells one upload's object from
// any other at the same key.
const uploadIDKey = "pipe-upload"

func (SinkType) Schema() sdk.Schema {
	attrs := []sdk.Attribute{
		commonAttributes()[0], // bucket
		{Name: "key", Type: sdk.String, Required: true, Key: true, Description: `Where each stream goes in the bucket. A key ending in "/" is a folder that receives every stream as ${stream.name}${stream.ext} (e.g. "pg/${pipeline.name}/${run.id}/"); a key that mentions ${stream.name} is a template; any other key is one object and the source must yield exactly one stream.`},
		{Name: "chunk_size", Type: sdk.Size, Default: defaultPartSize, Profile: "part_size", Description: "The size of the chunks of a resumable upload (256KiB to 1GiB, rounded up to a multiple of 256KiB): each stream buffers one chunk, so a failed chunk is sent again. Objects smaller than a chunk go up in one request. The profile's part_size when not set."},
	}
	attrs = append(attrs, commonAttributes()[1:]...)
	attrs = append(attrs, objlock.Attributes("GCS object retention", "the bucket must have object retention enabled: gcloud storage buckets create --enable-per-object-retention")...)
	return sdk.Schema{
		Description:     "Writes each stream as one object of a Google Cloud Storage bucket (or an emulator's) with a resumable upload that is finalized only when the stream ended well; the stored object's size and CRC32C are checked against what was sent. Lists, reads back and deletes objects for manifests and retention.",
		Storage:         true,
		ExclusiveCreate: true,
		Attributes:      attrs,
	}
}

type sinkConfig struct {
	ChunkSize int64 `pipe:"chunk_size"`
}

func sinkSettings(cfg sdk.Config) (sinkConfig, sdk.Diagnostics) {
	c := sinkConfig{ChunkSize: defaultPartSize}
	if d := decode(cfg, &c); d.HasErrors() {
		return c, d
	}
	if c.ChunkSize < chunkUnit || c.ChunkSize > maxChunk {
		return c, sdk.AttrError("chunk_size", "invalid chunk_size", fmt.Sprintf("chunk_size = %s; it must be between 256KiB and 1GiB", sdk.FormatSize(c.ChunkSize)))
	}
	c.ChunkSize = roundUp(c.ChunkSize, chunkUnit)
	return c, nil
}

func roundUp(n, unit int64) int64 { return (n + unit - 1) / unit * unit }

// Memory is one chunk per stream, and the connections' buffers.
func (SinkType) Memory(cfg sdk.Config, streams int) int64 {
	c, d := sinkSettings(cfg)
	if d.HasErrors() {
		return 0
	}
	return int64(max(streams, 1)) * (c.ChunkSize + streamOverhead)
}

// SmallObjectMemory is Memory for objects of at most maxObject bytes: the
// chunk each takes is no larger than it needs (chunkFor).
func (SinkType) SmallObjectMemory(cfg sdk.Config, streams int, maxObject int64) int64 {
	c, d := sinkSettings(cfg)
	if d.HasErrors() {
		return 0
	}
	return int64(max(streams, 1)) * (chunkFor(c.ChunkSize, sdk.Object{Size: maxObject}) + streamOverhead)
}

func (SinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	c, d := newConfig(cfg)
	if d.HasErrors() {
		return nil, d
	}
	sc, diags := sinkSettings(cfg)
	diags = append(diags, c.check()...)
	lk := objlock.Default()
	diags = append(diags, decode(cfg, &lk)...)
	diags = append(diags, lk.Check()...)
	if diags.HasErrors() {
		return nil, diags
	}
	cl, d := connect(ctx, c)
	diags = append(diags, d...)
	if diags.HasErrors() {
		return nil, diags
	}
	return &Sink{c: cl, chunk: sc.ChunkSize, lk: lk}, diags
}

// Sink writes objects to a bucket.
type Sink struct {
	c     *client
	chunk int64
	lk    objlock.Config

	mu      sync.Mutex
	checked bool
	bucket  error // the bucket check's result, once known
}

// chunkFor is the chunk size of an object: the configured one, or less
// for an object known to be smaller (the library allocates the whole
// chunk for every upload).
func chunkFor(chunk int64, obj sdk.Object) int64 {
	bound := obj.Size
	if bound < 0 {
		bound = obj.MaxSize
	}
	if bound >= 0 && bound < chunk {
		// One byte more than the object, so that the whole of it fits
		// one request.
		return min(chunk, roundUp(bound+1, chunkUnit))
	}
	return chunk
}

// checkKey catches object names Cloud Storage refuses or that are surely
// mistakes, before any byte moves.
func checkKey(key string) error {
	switch {
	case key == "":
		return errors.New("the object key is empty")
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("%q: object keys do not start with /; write the sink's key without the leading /", key)
	case len(key) > 1024:
		return fmt.Errorf("the object key has %d bytes; Cloud Storage allows 1024", len(key))
	case strings.ContainsAny(key, "\r\n"):
		return fmt.Errorf("%q: object keys may not hold line breaks", key)
	case key == "." || key == ".." || strings.HasSuffix(key, "/"):
		return fmt.Errorf("%q is not an object name", key)
	}
	return nil
}

// ready checks once that the bucket exists, before the first object,
// so that a wrong bucket name or refused credentials fail the run before
// any byte is read. A 403 is no answer: credentials that may write objects
// need not be allowed to read the bucket's metadata.
func (s *Sink) ready(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.checked {
		return s.bucket
	}
	_, err := s.c.bkt.Attrs(ctx)
	var gerr *googleapi.Error
	if errors.As(err, &gerr) && gerr.Code == 403 {
		err = nil
	}
	if err != nil {
		err = s.c.explain("checking the bucket", "", err)
	}
	if ctx.Err() == nil {
		s.checked, s.bucket = true, err
	}
	return err
}

// Create starts a resumable upload. Nothing is sent before the first
// chunk is full or the object is committed; nothing is visible before
// Commit.
func (s *Sink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	if err := checkKey(obj.Key); err != nil {
		return nil, fmt.Errorf("%s: %w", s.c.url(obj.Key), err)
	}
	if err := s.ready(ctx); err != nil {
		return nil, err
	}
	uctx, cancel := context.WithCancel(ctx)
	w := &objectWriter{c: s.c, key: obj.Key, id: uploadID(), ctx: uctx, cancel: cancel, exclusive: obj.Exclusive}
	w.attempts.max = int64(s.c.retries)
	h := s.c.bkt.Object(obj.Key)
	if obj.Exclusive {
		// The service creates the object only if none is at the key
		// (ifGenerationMatch=0).
		h = h.If(storage.Conditions{DoesNotExist: true})
	}
	h = h.Retryer(storage.WithPolicy(storage.RetryAlways), storage.WithBackoff(backoff()),
		storage.WithErrorFunc(w.attempts.retry))
	sw := h.NewWriter(uctx)
	sw.ChunkSize = int(chunkFor(s.chunk, obj))
	// Retries are bounded by count (attempts), each attempt by the
	// timeout; the library's per-chunk deadline would cut a slow chunk's
	// retries short.
	sw.ChunkRetryDeadline = 24 * time.Hour
	sw.ContentType = "application/octet-stream"
	if strings.HasSuffix(obj.Key, ".json") {
		sw.ContentType = "application/json"
	}
	sw.Metadata = map[string]string{uploadIDKey: w.id}
	if s.lk.Locks(obj.Key) {
		// Object retention, set with the upload: the object is never
		// there unlocked. A retained object cannot be deleted nor
		// replaced, so no later generation can hide it.
		sw.Retention = &storage.ObjectRetention{Mode: "Unlocked", RetainUntil: s.lk.Until(time.Now())}
		if s.lk.Compliance() {
			sw.Retention.Mode = "Locked"
		}
	}
	sw.ProgressFunc = func(int64) { w.attempts.reset() }
	w.w = sw
	return w, nil
}

func uploadID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// attempts counts the failures of an upload since its last chunk went
// through, and stops the library's retries after max of them.
type attempts struct {
	max    int64
	failed atomic.Int64
}

func (a *attempts) retry(err error) bool {
	return a.failed.Add(1) <= a.max && storage.ShouldRetry(err)
}

func (a *attempts) reset() { a.failed.Store(0) }

const (
	writing = iota
	committed
	aborted
	failed
)

// objectWriter is one upload.
type objectWriter struct {
	c        *client
	key      string
	id       string
	ctx      context.Context // of Create: once it ends, nothing commits
	cancel   context.CancelFunc
	w        *storage.Writer
	attempts attempts
	crc      uint32
	n        int64
	// exclusive: the upload creates the object only if none is at the
	// key (sdk.Object.Exclusive).
	exclusive bool

	mu    sync.Mutex
	state int
}

func (w *objectWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, w.c.explain("uploading", w.key, err)
	}
	n, err := w.w.Write(p)
	w.crc = crc32.Update(w.crc, castagnoli, p[:n])
	w.n += int64(n)
	if err != nil {
		return n, w.c.explain("uploading", w.key, err)
	}
	return n, nil
}

func (w *objectWriter) setState(s int) (was int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	was = w.state
	if was == writing {
		w.state = s
	}
	return was
}

// Commit finalizes the upload and checks what the service stored.
func (w *objectWriter) Commit(ctx context.Context) error {
	w.mu.Lock()
	st := w.state
	w.mu.Unlock()
	switch st {
	case committed:
		return nil
	case aborted, failed:
		return fmt.Errorf("not committing %s: its upload was aborted", w.c.url(w.key))
	}
	if err := w.ctx.Err(); err != nil {
		w.Abort(ctx)
		return w.c.explain("not committing", w.key, err)
	}
	err := w.w.Close()
	if err != nil && w.exclusive && isPrecondition(err) {
		if w.landed(ctx) {
			// A retry of the finishing request whose answer was lost:
			// the object at the key is this upload's.
			w.setState(committed)
			w.cancel()
			return nil
		}
		w.setState(failed)
		w.cancel()
		return fmt.Errorf("%s %w: the service refused to replace it (ifGenerationMatch=0)", w.c.url(w.key), sdk.ErrExists)
	}
	if err != nil {
		w.setState(failed)
		w.cancel()
		err = w.c.explain("uploading", w.key, err)
		// The last request may have reached the service even though
		// its answer did not come back.
		if rerr := w.removeOurs(ctx); rerr != nil {
			return fmt.Errorf("%w; the object may be stored nevertheless and could not be checked (%v): delete it if it is there", err, rerr)
		}
		return err
	}
	a := w.w.Attrs()
	if a.Size != w.n || a.CRC32C != w.crc {
		w.setState(failed)
		w.cancel()
		msg := fmt.Sprintf("uploading %s: the service stored %d bytes with CRC32C %08x, but %d bytes with CRC32C %08x were sent: the upload was damaged on the way",
			w.c.url(w.key), a.Size, a.CRC32C, w.n, w.crc)
		if err := w.remove(ctx, a.Generation); err != nil {
			return fmt.Errorf("%s, and deleting the damaged object failed (%v): delete it", msg, err)
		}
		return fmt.Errorf("%s; the damaged object was deleted: run again", msg)
	}
	w.setState(committed)
	w.cancel()
	return nil
}

// isPrecondition reports whether err is the service's refusal of a
// condition (412).
func isPrecondition(err error) bool {
	var gerr *googleapi.Error
	return errors.As(err, &gerr) && gerr.Code == 412
}

// landed reports whether the object at the key is this upload's, whole.
func (w *objectWriter) landed(ctx context.Context) bool {
	a, err := w.c.bkt.Object(w.key).Attrs(ctx)
	return err == nil && a.Metadata[uploadIDKey] == w.id && a.Size == w.n && a.CRC32C == w.crc
}

// Abort abandons the upload: an upload that was never finalized leaves no
// object. Abort after Commit is a no-op.
func (w *objectWriter) Abort(ctx context.Context) error {
	if w.setState(aborted) == committed {
		return nil
	}
	w.cancel()
	return nil
}

// removeOurs deletes the object at the key if this upload made it.
func (w *objectWriter) removeOurs(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	a, err := w.c.bkt.Object(w.key).Attrs(ctx)
	if errors.Is(err, storage.ErrObjectNotExist) {
		return nil
	}
	if err != nil {
		return w.c.explain("checking", w.key, err)
	}
	if a.Metadata[uploadIDKey] != w.id {
		return nil // someone else's
	}
	return w.remove(ctx, a.Generation)
}

func (w *objectWriter) remove(ctx context.Context, gen int64) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	err := w.c.bkt.Object(w.key).If(storage.Conditions{GenerationMatch: gen}).Delete(ctx)
	if err == nil || errors.Is(err, storage.ErrObjectNotExist) {
		return nil
	}
	return w.c.explain("deleting", w.key, err)
}

var _ sdk.Locker = (*Sink)(nil)

// ObjectLock says how the object at key is retained: GCS's "Locked"
// retention is compliance (nobody can shorten it), "Unlocked" governance.
func (s *Sink) ObjectLock(ctx context.Context, key string) (sdk.Lock, error) {
	a, err := s.c.bkt.Object(key).Attrs(ctx)
	if err != nil {
		return sdk.Lock{}, s.c.explain("looking up the retention of", key, err)
	}
	l := sdk.Lock{LegalHold: a.TemporaryHold || a.EventBasedHold}
	if r := a.Retention; r != nil && !r.RetainUntil.IsZero() {
		l.Mode, l.Until = "GOVERNANCE", r.RetainUntil
		if r.Mode == "Locked" {
			l.Mode = "COMPLIANCE"
		}
	}
	return l, nil
}

// Remove deletes an object; an object that is not there is no error.
func (s *Sink) Remove(ctx context.Context, key string) error {
	err := s.c.bkt.Object(key).Delete(ctx)
	if err == nil || errors.Is(err, storage.ErrObjectNotExist) {
		return nil
	}
	return s.c.explain("deleting", key, err)
}

// List returns the objects whose keys start with prefix, sorted by key.
func (s *Sink) List(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error) {
	q := &storage.Query{Prefix: prefix}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated"}); err != nil {
		return nil, err
	}
	var out []sdk.ObjectInfo
	it := s.c.bkt.Objects(ctx, q)
	for {
		a, err := it.Next()
		if err == iterator.Done {
			return out, nil
		}
		if err != nil {
			return nil, s.c.explain("listing", prefix+"*", err)
		}
		out = append(out, sdk.ObjectInfo{Key: a.Name, Size: a.Size, Modified: a.Updated})
	}
}

var _ sdk.AfterLister = (*Sink)(nil)

// ListAfter returns up to limit objects under prefix whose names sort
// after after, in name order: one listing request from after on.
func (s *Sink) ListAfter(ctx context.Context, prefix, after string, limit int) ([]sdk.ObjectInfo, error) {
	q := &storage.Query{Prefix: prefix, StartOffset: after}
	if err := q.SetAttrSelection([]string{"Name", "Size", "Updated"}); err != nil {
		return nil, err
	}
	var out []sdk.ObjectInfo
	it := s.c.bkt.Objects(ctx, q)
	it.PageInfo().MaxSize = limit + 1
	for len(out) < limit {
		a, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			return nil, s.c.explain("listing", prefix+"*", err)
		}
		if a.Name > after { // StartOffset includes after itself
			out = append(out, sdk.ObjectInfo{Key: a.Name, Size: a.Size, Modified: a.Updated})
		}
	}
	return out, nil
}

// Open reads a committed object (a manifest, say).
func (s *Sink) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	r, err := s.c.bkt.Object(key).ReadCompressed(s.c.compressed).NewReader(ctx)
	if err != nil {
		return nil, s.c.explain("reading", key, err)
	}
	return &explainedReader{r: r, explain: func(err error) error { return s.c.explain("reading", key, err) }}, nil
}

// OpenRange reads part of a committed object (see sdk.RangeOpener).
func (s *Sink) OpenRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	return s.c.openRange(ctx, key, offset, length)
}

// openRange reads length bytes of the object at key from offset on, in
// one request (a deduplicated chunk's blob).
func (c *client) openRange(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	r, err := c.bkt.Object(key).ReadCompressed(c.compressed).NewRangeReader(ctx, offset, length)
	if err != nil {
		return nil, c.explain("reading", key, err)
	}
	return &explainedReader{r: r, explain: func(err error) error { return c.explain("reading", key, err) }}, nil
}

type explainedReader struct {
	r       io.ReadCloser
	explain func(error) error
}

func (r *explainedReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		err = r.explain(err)
	}
	return n, err
}

func (r *explainedReader) Close() error { return r.r.Close() }

// Close releases the connections.
func (s *Sink) Close() error { return s.c.close() }
