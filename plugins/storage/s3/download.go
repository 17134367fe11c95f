package s3

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// byteRange is a part of an object: off and length n.
type byteRange struct{ off, n int64 }

// planRanges splits an object of size bytes into ranges of partSize.
func planRanges(size, partSize int64) []byteRange {
	var out []byteRange
	for off := int64(0); off < size; off += partSize {
		out = append(out, byteRange{off, min(partSize, size-off)})
	}
	return out
}

// httpRange is the Range header value for n bytes from off.
func (r byteRange) header() string { return fmt.Sprintf("bytes=%d-%d", r.off, r.off+r.n-1) }

// parseContentRange returns the total size in a Content-Range header
// ("bytes 0-99/1000").
func parseContentRange(v string) (int64, bool) {
	i := strings.LastIndexByte(v, '/')
	if !strings.HasPrefix(v, "bytes ") || i < 0 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[i+1:], 10, 64)
	return n, err == nil && n >= 0
}

// open reads the object at key with ranged GETs of part_size,
// concurrency of them in flight, handed out in order.
//
// The first range is requested at once: its answer says how large the
// object is (and for an object of one part it is all there is). The other
// ranges are asked only for the version read first (If-Match on its ETag),
// so an object replaced during a restore fails it instead of mixing two
// versions.
func (s *store) open(ctx context.Context, key string) (io.ReadCloser, error) {
	ctx, cancel := context.WithCancel(ctx)
	first := byteRange{0, s.cfg.PartSize}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &key, Range: aws.String(first.header())})
	if err != nil {
		if isCode(err, "InvalidRange") {
			// An empty object has no byte 0.
			head, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
			if herr == nil && aws.ToInt64(head.ContentLength) == 0 {
				cancel()
				return io.NopCloser(strings.NewReader("")), nil
			}
		}
		cancel()
		return nil, s.fail("reading", key, err)
	}
	size, ranged := parseContentRange(aws.ToString(out.ContentRange))
	if !ranged {
		// The store ignored the range and sends the whole object.
		return &wholeReader{s: s, key: key, body: out.Body, cancel: cancel}, nil
	}
	r := &rangeReader{s: s, key: key, etag: aws.ToString(out.ETag), ctx: ctx, cancel: cancel,
		ranges: planRanges(size, s.cfg.PartSize)}
	r.parts = make([]*rangePart, len(r.ranges))
	if len(r.ranges) == 0 {
		out.Body.Close()
		return r, nil
	}
	r.start(0, out.Body)
	for i := 1; i < min(len(r.ranges), s.cfg.Concurrency); i++ {
		r.start(i, nil)
	}
	return r, nil
}

// rangeReader hands out the ranges of an object in order while up to
// concurrency of them download: the one being read and those after it.
type rangeReader struct {
	s      *store
	key    string
	etag   string
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	ranges []byteRange
	parts  []*rangePart
	cur    int // the part being read
	off    int // read of it so far
	free   [][]byte
	closed bool
}

type rangePart struct {
	r    byteRange
	buf  []byte
	done chan struct{}
	err  error
}

// start downloads range i; body, if not nil, is the answer to its first
// request.
func (r *rangeReader) start(i int, body io.ReadCloser) {
	p := &rangePart{r: r.ranges[i], done: make(chan struct{})}
	if n := len(r.free); n > 0 && int64(cap(r.free[n-1])) >= p.r.n {
		p.buf, r.free = r.free[n-1][:p.r.n], r.free[:n-1]
	} else {
		p.buf = make([]byte, p.r.n)
	}
	r.parts[i] = p
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(p.done)
		p.err = r.fetch(p, body)
	}()
}

// fetch fills p.buf. A body that breaks off (a reset connection, a
// stall) is asked again for the bytes still missing, up to retries
// times in a row without progress; the SDK retries failed requests
// itself.
func (r *rangeReader) fetch(p *rangePart, body io.ReadCloser) error {
	got := int64(0)
	fails := 0
	wait := 100 * time.Millisecond
	for {
		if body == nil {
			rest := byteRange{p.r.off + got, p.r.n - got}
			in := &s3.GetObjectInput{Bucket: &r.s.bucket, Key: &r.key, Range: aws.String(rest.header())}
			if r.etag != "" {
				in.IfMatch = aws.String(r.etag)
			}
			out, err := r.s.client.GetObject(r.ctx, in)
			if err != nil {
				return r.s.fail(fmt.Sprintf("reading bytes %d-%d of", rest.off, rest.off+rest.n-1), r.key, err)
			}
			body = out.Body
		}
		k, err := io.ReadFull(body, p.buf[got:])
		got += int64(k)
		if err == nil {
			drain(body)
		}
		body.Close()
		body = nil
		if err == nil {
			return nil
		}
		if r.ctx.Err() != nil {
			return r.s.fail("reading", r.key, r.ctx.Err())
		}
		if k >= minProgress {
			// It moved on: the next break is a new one.
			fails, wait = 0, 100*time.Millisecond
		}
		fails++
		if fails > r.s.cfg.Retries {
			return r.s.fail(fmt.Sprintf("reading bytes %d-%d of", p.r.off+got, p.r.off+p.r.n-1), r.key, err)
		}
		select {
		case <-r.ctx.Done():
			return r.s.fail("reading", r.key, r.ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// minProgress is what an attempt that broke off must have read for its
// failure not to count against retries: a connection that dies every
// few bytes fails the restore instead of crawling on forever.
const minProgress = 64 << 10

// drain reads the end of a body that holds no more than was asked, so its
// connection goes back to the pool.
func drain(body io.Reader) {
	var b [512]byte
	body.Read(b[:])
}

func (r *rangeReader) Read(b []byte) (int, error) {
	for {
		if r.closed {
			return 0, fmt.Errorf("%s: read after close", r.s.url(r.key))
		}
		if r.cur >= len(r.parts) {
			return 0, io.EOF
		}
		p := r.parts[r.cur]
		select {
		case <-p.done:
		case <-r.ctx.Done():
			return 0, r.s.fail("reading", r.key, r.ctx.Err())
		}
		if p.err != nil {
			return 0, p.err
		}
		if r.off < len(p.buf) {
			n := copy(b, p.buf[r.off:])
			r.off += n
			return n, nil
		}
		// This range is read: its buffer goes to the next one.
		r.free = append(r.free, p.buf)
		p.buf = nil
		r.cur++
		r.off = 0
		if next := r.cur + r.s.cfg.Concurrency - 1; next < len(r.parts) {
			r.start(next, nil)
		}
	}
}

// Close stops the downloads in flight.
func (r *rangeReader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.cancel()
	r.wg.Wait()
	r.free, r.parts = nil, nil
	return nil
}

// wholeReader reads an object from a store that ignored the Range header.
type wholeReader struct {
	s      *store
	key    string
	body   io.ReadCloser
	cancel context.CancelFunc
}

func (w *wholeReader) Read(b []byte) (int, error) {
	n, err := w.body.Read(b)
	if err != nil && err != io.EOF {
		err = w.s.fail("reading", w.key, err)
	}
	return n, err
}

func (w *wholeReader) Close() error {
	w.cancel()
	return w.body.Close()
}
