package azure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
)

// openBlob opens a blob for reading with parallel ranged GETs. The first
// range's answer gives the blob's size and ETag; every other range is
// pinned to that ETag, so a blob replaced mid-read fails instead of mixing
// two versions.
func openBlob(ctx context.Context, cl *client, key string) (io.ReadCloser, error) {
	where := cl.where + "/" + key
	if err := checkBlobName(key); err != nil {
		return nil, fmt.Errorf("reading %s: %w", where, err)
	}
	bc := cl.c.NewBlobClient(key)
	bs := cl.blockSize
	resp, err := bc.DownloadStream(ctx, &blob.DownloadStreamOptions{Range: blob.HTTPRange{Offset: 0, Count: bs}})
	if err != nil {
		if bloberror.HasCode(err, bloberror.InvalidRange) {
			// An empty blob has no byte 0 to start a range at.
			props, perr := bc.GetProperties(ctx, nil)
			if perr == nil && props.ContentLength != nil && *props.ContentLength == 0 {
				return io.NopCloser(strings.NewReader("")), nil
			}
		}
		return nil, cl.explain("reading", where, err)
	}
	size, ok := totalSize(resp.ContentRange)
	if !ok {
		// A whole-blob answer (no Content-Range).
		if resp.ContentLength == nil {
			resp.Body.Close()
			return nil, fmt.Errorf("reading %s: the service sent neither Content-Range nor Content-Length", where)
		}
		size = *resp.ContentLength
	}
	first := resp.Body
	if size == 0 {
		first.Close()
		return io.NopCloser(strings.NewReader("")), nil
	}
	if n := min(bs, size); resp.ContentLength == nil || *resp.ContentLength != n {
		// Not the first range as asked: read it again, as a range.
		first.Close()
		first = nil
	}
	var etag azcore.ETag
	if resp.ETag != nil {
		etag = *resp.ETag
	}
	r := newRangeReader(ctx, bc, where, size, bs, cl.conc, cl.retries, etag)
	r.start(first)
	return r, nil
}

// totalSize reads the blob's size from "bytes 0-1023/4096".
func totalSize(contentRange *string) (int64, bool) {
	if contentRange == nil {
		return 0, false
	}
	_, total, ok := strings.Cut(*contentRange, "/")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(total), 10, 64)
	return n, err == nil && n >= 0
}

// rangeReader fetches a blob's ranges concurrently and hands their bytes
// out in order. It owns concurrency buffers of block_size: a range is only
// fetched once a buffer is free, and a buffer is free once Read has handed
// out its bytes, so a slow reader holds the downloads back.
type rangeReader struct {
	ctx     context.Context
	cancel  context.CancelFunc
	bc      *blob.Client
	where   string
	size    int64
	bs      int64
	retries int
	etag    azcore.ETag

	buffers chan []byte // free buffers (nil until first used)
	parts   chan *part  // ranges in order, as they are started
	sched   chan struct{}
	wg      sync.WaitGroup

	cur    *part
	off    int
	served int64
	err    error
}

type part struct {
	off, n int64
	buf    []byte
	err    error
	done   chan struct{}
}

// retryDelay is the first wait before a range whose transfer broke is
// asked for again; it doubles per attempt up to maxRetryDelay.
var (
	retryDelay    = time.Second
	maxRetryDelay = 30 * time.Second
)

func newRangeReader(ctx context.Context, bc *blob.Client, where string, size, bs int64, conc, retries int, etag azcore.ETag) *rangeReader {
	rctx, cancel := context.WithCancel(ctx)
	r := &rangeReader{ctx: rctx, cancel: cancel, bc: bc, where: where, size: size, bs: bs, retries: retries, etag: etag,
		buffers: make(chan []byte, conc), parts: make(chan *part, conc), sched: make(chan struct{})}
	for i := 0; i < conc; i++ {
		r.buffers <- nil
	}
	return r
}

// start launches the scheduler; first is the body of range 0, if the
// opening request already brought it.
func (r *rangeReader) start(first io.ReadCloser) {
	go func() {
		defer close(r.sched)
		defer close(r.parts)
		for off := int64(0); off < r.size; off += r.bs {
			var buf []byte
			select {
			case buf = <-r.buffers:
			case <-r.ctx.Done():
				if first != nil {
					first.Close()
				}
				return
			}
			p := &part{off: off, n: min(r.bs, r.size-off), done: make(chan struct{})}
			r.wg.Add(1)
			go r.fetch(p, buf, first)
			first = nil
			r.parts <- p // never blocks: at most len(buffers) parts are unread
		}
	}()
}

// fetch reads one range into buf. The request itself is retried by
// azcore's policy; a transfer that breaks midway is resumed from where it
// stopped: at once when it moved bytes, after a growing wait when it did
// not, and at most retries times in a row without progress.
func (r *rangeReader) fetch(p *part, buf []byte, body io.ReadCloser) {
	defer r.wg.Done()
	defer close(p.done)
	if int64(cap(buf)) < p.n {
		buf = make([]byte, p.n)
	}
	buf = buf[:p.n]
	p.buf = buf
	got := int64(0)
	for attempt := 0; ; {
		if body == nil {
			resp, err := r.bc.DownloadStream(r.ctx, &blob.DownloadStreamOptions{
				Range:            blob.HTTPRange{Offset: p.off + got, Count: p.n - got},
				AccessConditions: r.pinned(),
			})
			if err != nil {
				p.err = r.rangeError(p, err)
				return
			}
			if resp.ContentLength != nil && *resp.ContentLength != p.n-got {
				resp.Body.Close()
				p.err = fmt.Errorf("reading %s: asked for %d bytes at %d, the service sent %d", r.where, p.n-got, p.off+got, *resp.ContentLength)
				return
			}
			body = resp.Body
		}
		k, err := io.ReadFull(body, buf[got:])
		body.Close()
		body = nil
		got += int64(k)
		if err == nil {
			return
		}
		if r.ctx.Err() != nil {
			p.err = r.rangeError(p, r.ctx.Err())
			return
		}
		if k > 0 {
			attempt = 0 // it moved: go on from there at once
			continue
		}
		if attempt >= r.retries {
			p.err = r.rangeError(p, err)
			return
		}
		delay := min(retryDelay<<attempt, maxRetryDelay)
		attempt++
		select {
		case <-time.After(delay):
		case <-r.ctx.Done():
			p.err = r.rangeError(p, r.ctx.Err())
			return
		}
	}
}

func (r *rangeReader) pinned() *blob.AccessConditions {
	if r.etag == "" {
		return nil
	}
	return &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &r.etag}}
}

func (r *rangeReader) rangeError(p *part, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		err = errors.New("the connection ended before the range did, and retries did not help")
	}
	return explain(fmt.Sprintf("reading bytes %d-%d of", p.off, p.off+p.n-1), r.where, err)
}

func (r *rangeReader) Read(b []byte) (int, error) {
	for {
		if r.err != nil {
			return 0, r.err
		}
		if r.cur != nil {
			if r.off < len(r.cur.buf) {
				n := copy(b, r.cur.buf[r.off:])
				r.off += n
				r.served += int64(n)
				return n, nil
			}
			r.buffers <- r.cur.buf // never blocks: this part held it
			r.cur = nil
		}
		var p *part
		var ok bool
		select {
		case p, ok = <-r.parts:
		case <-r.ctx.Done():
			r.err = explain("reading", r.where, r.ctx.Err())
			continue
		}
		if !ok {
			if err := r.ctx.Err(); err != nil {
				r.err = explain("reading", r.where, err)
				continue
			}
			if r.served != r.size {
				r.err = fmt.Errorf("reading %s: %d of %d bytes arrived", r.where, r.served, r.size)
				continue
			}
			return 0, io.EOF
		}
		select {
		case <-p.done:
		case <-r.ctx.Done():
			r.err = explain("reading", r.where, r.ctx.Err())
			continue
		}
		if p.err != nil {
			r.err = p.err
			r.cancel() // stop the other ranges
			continue
		}
		r.cur, r.off = p, 0
	}
}

// Close stops every range in flight and waits for them.
func (r *rangeReader) Close() error {
	r.cancel()
	<-r.sched
	r.wg.Wait()
	return nil
}
