package engine

import (
	"context"
	"io"
	"time"

	"golang.org/x/time/rate"
)

// throttle caps the bytes per second of one scope (the source of a run, or
// one sink) with a single token bucket shared by every stream, so the cap
// holds in total however many streams, workers or parts run at once.
type throttle struct {
	l *rate.Limiter
	// piece is the most bytes taken at once, and the bucket's size: about
	// 20 ms of traffic, so bursts stay short at any rate.
	piece int
}

// newThrottle returns nil for bps ≤ 0: no limit.
func newThrottle(bps int64) *throttle {
	if bps <= 0 {
		return nil
	}
	piece := int(min(max(bps/50, 16<<10), 1<<20))
	return &throttle{l: rate.NewLimiter(rate.Limit(bps), piece), piece: piece}
}

// wait blocks until n ≤ piece bytes may pass, or ctx ends.
func (t *throttle) wait(ctx context.Context, n int) error {
	r := t.l.ReserveN(time.Now(), n)
	d := r.Delay()
	if d == 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return context.Cause(ctx)
	}
}

// pieces runs do over p in pieces the throttle lets through, waiting
// before each, until p is done or do fails. It returns the bytes done and
// the time spent waiting for the throttle.
func (t *throttle) pieces(ctx context.Context, p []byte, do func([]byte) (int, error)) (int, time.Duration, error) {
	var waited time.Duration
	off := 0
	for off < len(p) {
		k := min(t.piece, len(p)-off)
		s := time.Now()
		err := t.wait(ctx, k)
		waited += time.Since(s)
		if err != nil {
			return off, waited, err
		}
		n, err := do(p[off : off+k])
		off += n
		if err != nil {
			return off, waited, err
		}
	}
	return off, waited, nil
}

// readFull is io.ReadFull(r, buf) in pieces the throttle lets through. It
// returns the time spent waiting for the throttle.
func (t *throttle) readFull(ctx context.Context, r io.Reader, buf []byte) (int, time.Duration, error) {
	n, waited, err := t.pieces(ctx, buf, func(b []byte) (int, error) { return io.ReadFull(r, b) })
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		err = io.ErrUnexpectedEOF // the end came inside buf
		if n == 0 {
			err = io.EOF
		}
	}
	return n, waited, err
}

// write is w.Write(p) in pieces the throttle lets through. It returns the
// time spent waiting for the throttle.
func (t *throttle) write(ctx context.Context, w io.Writer, p []byte) (int, time.Duration, error) {
	return t.pieces(ctx, p, w.Write)
}
