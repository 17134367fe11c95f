package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unsafe"
)

// stagePools are the buffers of one stage: out for its results, in for the
// units a Splitter cuts.
type stagePools struct {
	in, out *pool
	// unit is the payload size a Mapper cuts its input into, or the size a
	// Streamer fills its output chunks to.
	unit int
}

// workerPool runs the workers of one Mapper stage for every stream of a run.
type workerPool struct {
	stage *Stage
	meter *Meter
	jobs  chan *mapJob
	wg    sync.WaitGroup
}

// mapJob is one unit for a worker: src is consumed and released, the result
// goes into dst, which the dispatcher reserved, and dst goes to done.
type mapJob struct {
	src  *chunk
	dst  *chunk
	done chan<- *chunk
}

func startWorkers(st *Stage, m *Meter) (*workerPool, error) {
	wp := &workerPool{stage: st, meter: m, jobs: make(chan *mapJob)}
	mp := st.Proc.(Mapper)
	workers := make([]Worker, st.Workers)
	for i := range workers {
		w, err := mp.NewWorker()
		if err != nil {
			return nil, fmt.Errorf("%s: starting worker %d: %w", st.Name, i+1, err)
		}
		workers[i] = w
	}
	for _, w := range workers {
		wp.wg.Add(1)
		go wp.work(w)
	}
	return wp, nil
}

func (wp *workerPool) work(w Worker) {
	defer wp.wg.Done()
	for j := range wp.jobs {
		t := time.Now()
		out, err := w.Map(j.dst.buf[:0], j.src.data())
		wp.meter.addBusy(t)
		j.src.release()
		switch {
		case err != nil:
			j.dst.err = err
		case len(out) > 0 && (cap(out) != cap(j.dst.buf) || unsafe.SliceData(out) != unsafe.SliceData(j.dst.buf)):
			j.dst.err = fmt.Errorf("internal error: output of %d bytes outgrew its %d-byte buffer", len(out), cap(j.dst.buf))
		default:
			j.dst.n = len(out)
			wp.meter.out.Add(int64(len(out)))
		}
		j.done <- j.dst
	}
}

func (wp *workerPool) stop() {
	close(wp.jobs)
	wp.wg.Wait()
}

// mapStream runs one stream through a Mapper stage: it dispatches units to
// the shared workers and puts their results back in order.
func mapStream(ctx context.Context, wp *workerPool, pools stagePools, in <-chan *chunk, out chan<- *chunk) error {
	defer close(out)
	m := wp.meter
	// Each dispatched unit holds a reserved output buffer, so at most
	// pools.out.buffers() results are ever outstanding: done never blocks.
	done := make(chan *chunk, pools.out.buffers())
	total := make(chan int64, 1)
	dispatchErr := make(chan error, 1)
	// The dispatcher stops as soon as the reorder step fails: otherwise it
	// would fill done with results nobody takes and wait for a buffer
	// forever.
	dctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		n, err := dispatch(dctx, wp, pools, in, done)
		total <- n
		dispatchErr <- err
	}()
	err := reorder(ctx, m, pools.out, done, total, out)
	if err != nil {
		stop(err)
	}
	if derr := <-dispatchErr; err == nil {
		err = derr
	}
	return err
}

func dispatch(ctx context.Context, wp *workerPool, pools stagePools, in <-chan *chunk, done chan<- *chunk) (int64, error) {
	m := wp.meter
	var seq int64
	submit := func(src *chunk) error {
		t := time.Now()
		buf, err := pools.out.get(ctx)
		if err != nil {
			m.addBlocked(t)
			src.release()
			return err
		}
		j := &mapJob{src: src, dst: newChunk(pools.out, buf, seq), done: done}
		select {
		case wp.jobs <- j:
		case <-ctx.Done():
			m.addBlocked(t)
			src.release()
			j.dst.release()
			return context.Cause(ctx)
		}
		m.addBlocked(t)
		seq++
		return nil
	}
	if pools.in != nil {
		sp, ok := wp.stage.Proc.(Splitter)
		if !ok {
			sp = &fixedSplitter{n: pools.unit}
		}
		err := split(ctx, sp, m, pools, in, submit, done, &seq)
		return seq, err
	}
	for {
		t := time.Now()
		var c *chunk
		var ok bool
		select {
		case c, ok = <-in:
		case <-ctx.Done():
			return seq, context.Cause(ctx)
		}
		m.addWaitIn(t)
		if !ok {
			return seq, nil
		}
		m.in.Add(int64(c.n))
		m.chunks.Add(1)
		if err := submit(c); err != nil {
			return seq, err
		}
	}
}

// split cuts the input into units with a Splitter. When a unit does not fit,
// the rest of the stream is processed sequentially and its output enters the
// reorder step as already finished units.
func split(ctx context.Context, sp Splitter, m *Meter, pools stagePools, in <-chan *chunk, submit func(*chunk) error, done chan<- *chunk, seq *int64) error {
	r := &chunkReader{ctx: ctx, in: in, meter: m}
	defer r.abandon() // what is left in the channel, the stream drains
	for {
		t := time.Now()
		buf, err := pools.in.get(ctx)
		m.addBlocked(t)
		if err != nil {
			return err
		}
		unit, err := sp.NextUnit(r, buf)
		if err == nil {
			c := newChunk(pools.in, buf, 0)
			c.n = len(unit)
			if err := submit(c); err != nil {
				return err
			}
			continue
		}
		if errors.Is(err, io.EOF) {
			pools.in.put(buf)
			return nil
		}
		if !errors.Is(err, ErrUnitTooLarge) {
			pools.in.put(buf)
			return err
		}
		// Sequential from here on.
		w := &chunkWriter{ctx: ctx, pool: pools.out, size: pools.out.size, meter: m, seq: *seq,
			emit: func(c *chunk) error {
				*seq = c.seq + 1
				done <- c
				return nil
			}}
		t = time.Now()
		err = sp.Rest(ctx, w, io.MultiReader(&releasingReader{b: unit, release: func() { pools.in.put(buf) }}, r))
		m.addBusy(t)
		if err != nil {
			w.discard()
			return err
		}
		if w.cur != nil && w.cur.n > 0 {
			return w.flush()
		}
		w.discard()
		return nil
	}
}

// releasingReader reads b and calls release when b is used up.
type releasingReader struct {
	b       []byte
	release func()
}

func (r *releasingReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		if r.release != nil {
			r.release()
			r.release = nil
		}
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// reorder emits results in sequence order. It stops at the first failed
// unit. A stream that produced no unit at all gets one empty chunk.
func reorder(ctx context.Context, m *Meter, p *pool, done <-chan *chunk, totalCh <-chan int64, out chan<- *chunk) error {
	pending := map[int64]*chunk{}
	defer func() {
		for _, c := range pending {
			c.release()
		}
	}()
	var next int64
	total := int64(-1)
	for total < 0 || next < total {
		select {
		case c := <-done:
			if c.err != nil {
				err := c.err
				c.release()
				return err
			}
			pending[c.seq] = c
		case total = <-totalCh:
			totalCh = nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		for c, ok := pending[next]; ok; c, ok = pending[next] {
			delete(pending, next)
			next++
			t := time.Now()
			err := send(ctx, out, c)
			m.addBlocked(t)
			if err != nil {
				return err
			}
		}
	}
	if total == 0 {
		buf, err := p.get(ctx)
		if err != nil {
			return err
		}
		return send(ctx, out, newChunk(p, buf, 0))
	}
	return nil
}

// fixedSplitter cuts a byte stream into units of n bytes, for a Mapper whose
// chunk size differs from that of the chunks arriving.
// An empty stream gives one empty unit, as the source gives one empty chunk.
type fixedSplitter struct {
	n     int
	units int
}

func (f *fixedSplitter) NextUnit(r io.Reader, buf []byte) ([]byte, error) {
	k, err := io.ReadFull(r, buf[:f.n])
	if k > 0 || (err == io.EOF && f.units == 0) {
		f.units++
		return buf[:k], nil
	}
	return nil, err
}

func (*fixedSplitter) Rest(context.Context, io.Writer, io.Reader) error {
	return errors.New("internal error: fixed-size units always fit")
}
