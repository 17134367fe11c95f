package engine

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// A direct stream (fill, send) never passes through the engine's chunks,
// yet its observer stages (a checksum) must see every byte of it, in
// order. A follower reads the stream's file as far as it is complete (all
// of a file sent; the gap-free start of a file being filled, whose ranges
// land in any order) and hands the bytes to the observations, beside the
// move rather than after it: the digest of a 2 GiB download is then taken
// while the download runs, from the page cache it just filled.

// followPiece is the most a follower reads at a time: small enough that
// what it read is still in a core's L2 cache when the hash reads it (see
// direct's fillPiece). It reads no more than a chunk at a time either: its
// buffer stands in for the chunks the direct stream does not use, and the
// memory budget counts those.
const followPiece = 512 << 10

// watch is one observer stage's observation of a direct stream.
type watch struct {
	stage *Stage
	m     *Meter
	obs   Observation
}

// observers says whether every stage of the job only observes the bytes
// (a checksum): a stream may then go direct, followed.
func (r *Run) observers() bool {
	for _, s := range r.job.Stages {
		if _, ok := s.Proc.(Observer); !ok {
			return false
		}
	}
	return true
}

// follower feeds a direct stream's file to its observations as far as the
// move has completed it.
type follower struct {
	ctx    context.Context
	cancel context.CancelFunc
	f      *os.File
	piece  int // the most read at a time
	ws     []watch
	upto   atomic.Int64  // the file's bytes known complete
	wake   chan struct{} // upto grew, or the move ended
	ended  atomic.Bool   // upto is final
	start  sync.Once
	done   chan struct{} // run returned; err and failed are set
	err    error
	// failed is the watch whose Write failed (err), nil when reading
	// the file failed.
	failed *watch
	fed    int64 // the bytes the observations have seen
	// reading is blamed for a failure to read the file back: the
	// source's meter for a file sent, the sink's for a file filled.
	reading func(error) error
}

// follow returns a follower of f for the stream st's observer stages, or
// nil when the job has none; reading says whose failure one to read f is.
// It starts reading once advance or end is called; stop or end must be.
func (r *Run) follow(ctx context.Context, st *Stream, f *os.File, reading func(error) error) *follower {
	if len(r.job.Stages) == 0 {
		return nil
	}
	fl := &follower{f: f, piece: min(followPiece, max(r.job.ChunkSize, 1)), wake: make(chan struct{}, 1), done: make(chan struct{}), reading: reading}
	fl.ctx, fl.cancel = context.WithCancel(ctx)
	for k := range r.job.Stages {
		s := &r.job.Stages[k]
		fl.ws = append(fl.ws, watch{stage: s, m: r.stages[k], obs: s.Proc.(Observer).Observe(st.Name)})
	}
	return fl
}

// advance says the file's first n bytes are complete.
func (fl *follower) advance(n int64) {
	for {
		cur := fl.upto.Load()
		if n <= cur || fl.upto.CompareAndSwap(cur, n) {
			break
		}
	}
	fl.begin()
	fl.poke()
}

func (fl *follower) poke() {
	select {
	case fl.wake <- struct{}{}:
	default:
	}
}

// begin starts reading, once.
func (fl *follower) begin() {
	fl.start.Do(func() {
		go func() {
			fl.failed, fl.err = fl.run(fl.ctx)
			close(fl.done)
		}()
	})
}

// end says the move completed the file's n bytes and waits until the
// observations saw them; then it finishes them, recording each result in
// res under its stage's name. A failure names the stage, or is reading's.
func (fl *follower) end(ctx context.Context, n int64, res *StreamResult, mu *sync.Mutex) error {
	fl.advance(n)
	fl.ended.Store(true)
	fl.poke()
	<-fl.done
	fl.cancel()
	switch {
	case fl.failed != nil:
		return fl.failed.m.fail(ctx, wrap(fl.failed.stage, fl.err))
	case fl.err != nil:
		return fl.reading(fl.err)
	}
	for _, w := range fl.ws {
		v, err := w.obs.Finish()
		if err != nil {
			return w.m.fail(ctx, wrap(w.stage, err))
		}
		mu.Lock()
		res.Observed[w.stage.Name] = v
		mu.Unlock()
	}
	return nil
}

// close ends the follower of a move that moved n bytes and ended with
// moved: end when the move succeeded, stop when it failed (its failure is
// the caller's to report). A nil follower (nothing to observe) does
// nothing.
func (fl *follower) close(ctx context.Context, n int64, moved error, res *StreamResult, mu *sync.Mutex) error {
	if fl == nil {
		return nil
	}
	if moved != nil {
		fl.stop()
		return nil //nolint:nilerr // the move's failure is the caller's to report
	}
	return fl.end(ctx, n, res, mu)
}

// stop abandons a follower whose move failed or did not happen, and waits
// for it; a nil follower does nothing.
func (fl *follower) stop() {
	if fl == nil {
		return
	}
	fl.cancel()
	fl.begin() // one never started returns at once
	<-fl.done
}

// run reads the file up to upto, in order, into every observation, until
// the move ended and everything it completed was read. It returns the
// watch whose Write failed, or nil with a failure to read the file (or
// the end of ctx).
func (fl *follower) run(ctx context.Context) (*watch, error) {
	buf := make([]byte, fl.piece)
	for {
		// ended first: an upto read after it is final.
		ended := fl.ended.Load()
		for upto := fl.upto.Load(); fl.fed < upto; {
			if err := context.Cause(ctx); err != nil {
				return nil, err
			}
			k := int(min(int64(len(buf)), upto-fl.fed))
			got, err := fl.f.ReadAt(buf[:k], fl.fed)
			if got < k {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF // shorter than what was moved
				}
				return nil, fmt.Errorf("reading the file back for the checksum at byte %d: %w", fl.fed, err)
			}
			for i := range fl.ws {
				w := &fl.ws[i]
				t := time.Now()
				_, err := w.obs.Write(buf[:k])
				w.m.addBusy(t)
				if err != nil {
					return w, err
				}
				w.m.in.Add(int64(k))
				w.m.out.Add(int64(k))
				w.m.chunks.Add(1)
			}
			fl.fed += int64(k)
		}
		if ended {
			return nil, nil
		}
		select {
		case <-fl.wake:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}
