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

// readFull is io.ReadFull(r, buf) in pieces the throttle lets through. It
// returns the time spent waiting for the throttle.
func (t *throttle) readFull(ctx context.Context, r io.Reader, buf []byte) (int, time.Duration, error) {
	var waited time.Duration
	off := 0
	for off < len(buf) {
		k := min(t.piece, len(buf)-off)
		s := time.Now()
		if err := t.wait(ctx, k); err != nil {
			return off, waited + time.Since(s), err
		}
		waited += time.Since(s)
		n, err := io.ReadFull(r, buf[off:off+k])
		off += n
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			if off == 0 {
				return 0, waited, io.EOF
			}
			return off, waited, io.ErrUnexpectedEOF
		}
		if err != nil {
			return off, waited, err
		}
	}
	return off, waited, nil
}

// write is w.Write(p) in pieces the throttle lets through. It returns the
// time spent waiting for the throttle.
func (t *throttle) write(ctx context.Context, w io.Writer, p []byte) (int, time.Duration, error) {
	var waited time.Duration
	off := 0
	for off < len(p) {
		k := min(t.piece, len(p)-off)
		s := time.Now()
		if err := t.wait(ctx, k); err != nil {
			return off, waited + time.Since(s), err
		}
		waited += time.Since(s)
		n, err := w.Write(p[off : off+k])
		off += n
		if err != nil {
			return off, waited, err
		}
	}
	return off, waited, nil
}
