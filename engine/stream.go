package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/pipebackup/pipe/internal/direct"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// stream moves one stream from the source through the stages to the sinks
// and commits its objects if, and only if, everything succeeded.
func (r *Run) stream(ctx context.Context, i int) error {
	st := &r.job.Streams[i]
	res := &r.results[i]
	res.Name = st.Name
	res.Observed = map[string]string{}

	writers := make([]sdk.ObjectWriter, 0, len(r.job.Sinks))
	for k, s := range r.job.Sinks {
		t := time.Now()
		w, err := s.Sink.Create(ctx, st.Objects[k])
		r.sinks[k].addBusy(t)
		if err := r.sinks[k].fail(ctx, err); err != nil {
			abort(ctx, writers)
			return fmt.Errorf("sink %s: creating %q: %w", s.Name, st.Objects[k].Key, err)
		}
		writers = append(writers, w)
	}

	var err error
	chunks := true           // the stream moves through pipe's chunks
	var opened io.ReadCloser // by send, when the sink did not take the file
	if r.direct(st, writers) {
		if f := fillTarget(writers[0], len(r.job.Stages) > 0); f != nil {
			chunks, err = false, r.fill(ctx, st, res, f)
		} else {
			opened, err = r.send(ctx, st, res, writers[0])
			chunks = opened != nil
		}
	}
	if chunks {
		err = r.pump(ctx, st, res, writers, opened)
	}
	if err != nil {
		abort(ctx, writers)
		return err
	}
	for k, w := range writers {
		t := time.Now()
		err := w.Commit(ctx)
		r.sinks[k].addBusy(t)
		if err := r.sinks[k].fail(ctx, err); err != nil {
			abort(ctx, writers[k:]) // the failed one too: it cleans up what Commit left
			return fmt.Errorf("sink %s: committing %q: %w", r.job.Sinks[k].Name, st.Objects[k].Key, err)
		}
		r.mu.Lock()
		r.done = append(r.done, committed{sink: k, key: st.Objects[k].Key})
		r.mu.Unlock()
	}
	res.Objects = st.Objects
	res.Committed = true
	return nil
}

// pump moves the stream in chunks from the source through the stages and
// checks to every sink's writer; opened, if not nil, is the stream,
// opened already.
func (r *Run) pump(ctx context.Context, st *Stream, res *StreamResult, writers []sdk.ObjectWriter, opened io.ReadCloser) error {
	g, gctx := errgroup.WithContext(ctx)
	var chans []chan *chunk
	newCh := func() chan *chunk {
		c := make(chan *chunk, max(1, r.job.Depth))
		chans = append(chans, c)
		return c
	}
	cur := newCh()
	src := cur
	g.Go(func() error { return r.source.fail(gctx, r.read(gctx, st, res, src, opened)) })
	for _, obs := range st.Checks {
		in, out := cur, newCh()
		g.Go(func() error {
			_, err := observe(gctx, r.checks, obs, in, out)
			return r.checks.fail(gctx, err)
		})
		cur = out
	}
	for k := range r.job.Stages {
		s := &r.job.Stages[k]
		in, out := cur, newCh()
		m := r.stages[k]
		switch p := s.Proc.(type) {
		case Mapper:
			g.Go(func() error { return m.fail(gctx, wrap(s, mapStream(gctx, r.workers[k], r.pools[k], in, out))) })
		case Streamer:
			g.Go(func() error { return m.fail(gctx, wrap(s, runStreamer(gctx, p, m, r.pools[k], in, out))) })
		case Observer:
			g.Go(func() error {
				v, err := observe(gctx, m, p.Observe(st.Name), in, out)
				if err == nil {
					r.mu.Lock()
					res.Observed[s.Name] = v
					r.mu.Unlock()
				}
				return m.fail(gctx, wrap(s, err))
			})
		}
		cur = out
	}
	sinkChans := make([]chan *chunk, len(writers))
	for k := range writers {
		sinkChans[k] = newCh()
		in, w, m, lim, name, key := sinkChans[k], writers[k], r.sinks[k], r.sinkLimits[k], r.job.Sinks[k].Name, st.Objects[k].Key
		g.Go(func() error { return m.fail(gctx, write(gctx, m, lim, w, in, name, key)) })
	}
	last := cur
	g.Go(func() error { return distribute(gctx, last, sinkChans, &res.Written) })

	err := g.Wait()
	for _, c := range chans {
		drain(c)
	}
	return err
}

// direct says whether the stream goes unchanged from the source to its
// one object: no stage but observers (a checksum, which a follower feeds
// from the file), no check, no rate limit, one sink. The source may then
// write the object's file itself (fill), or the sink read the stream's
// file itself (send).
func (r *Run) direct(st *Stream, writers []sdk.ObjectWriter) bool {
	return r.observers() && len(st.Checks) == 0 && len(writers) == 1 && r.srcLimit == nil && r.sinkLimits[0] == nil
}

func wrap(s *Stage, err error) error {
	if err == nil {
		return nil
	}
	if s.Label != "" {
		return fmt.Errorf("%s (%s): %w", s.Name, s.Label, err)
	}
	return fmt.Errorf("%s: %w", s.Name, err)
}

// abort discards objects in flight; it runs even when ctx is cancelled.
func abort(ctx context.Context, ws []sdk.ObjectWriter) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, w := range ws {
		_ = w.Abort(ctx)
	}
}

// fillTarget returns the file of a direct stream's object when the source
// may write it itself (direct.Fill): an empty regular file (the fs sink's),
// which can also be read if followed (the stream has observers).
// Otherwise nil (a command's input, say).
func fillTarget(w sdk.ObjectWriter, followed bool) *os.File {
	fw, ok := w.(sdk.FileWriter)
	if !ok {
		return nil
	}
	f := fw.File()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != 0 {
		return nil
	}
	if followed {
		// Empty, so a file open for reading answers EOF; one open only
		// for writing, an error.
		if _, err := f.ReadAt(make([]byte, 1), 0); err != io.EOF {
			return nil
		}
	}
	return f
}

// fill has the source write the stream into f: an object store's ranges
// go in parallel straight to where they belong in the file, instead of
// being reassembled in order and copied through chunks (see direct.Fill).
// A follower reads the file's written start meanwhile for the observers.
func (r *Run) fill(ctx context.Context, st *Stream, res *StreamResult, f *os.File) error {
	h := r.handover()
	fl := r.follow(ctx, st, f, func(err error) error {
		return r.sinks[0].fail(ctx, fmt.Errorf("sink %s: %q: %w", r.job.Sinks[0].Name, st.Objects[0].Key, err))
	})
	var prefix func(int64)
	if fl != nil {
		prefix = fl.advance
	}
	n, err := direct.Fill(ctx, r.job.Source, st.Name, f, h.progress, prefix)
	res.Read, res.Written = n, n // what landed, also when it failed
	err = h.end(ctx, st, res, n, err, r.source)
	if ferr := fl.close(ctx, n, err, res, &r.mu); ferr != nil {
		return ferr
	}
	return err
}

// open opens the stream.
func (r *Run) open(ctx context.Context, st *Stream) (io.ReadCloser, error) {
	t := time.Now()
	rc, err := r.job.Source.Open(ctx, st.Name)
	r.source.addBusy(t)
	if err != nil {
		return nil, fmt.Errorf("source: opening: %w", err)
	}
	return rc, nil
}

// send has the sink's object take the stream's file itself, when the
// stream is a regular file (the fs source's) and the object can
// (direct.SendFile): an upload's parts then go up from their places in the
// file, without passing through chunks. Otherwise it returns the stream,
// opened, for the chunks.
func (r *Run) send(ctx context.Context, st *Stream, res *StreamResult, w sdk.ObjectWriter) (io.ReadCloser, error) {
	rc, err := r.open(ctx, st)
	if err != nil {
		return nil, r.source.fail(ctx, err)
	}
	fr, ok := rc.(sdk.FileReader)
	if !ok {
		return rc, nil
	}
	// A regular file with bytes, read from its start: the sink reads
	// [0, size) by offsets. Others (an empty-looking /proc file, a file a
	// source has read into already) go through the chunks, read to EOF.
	fi, err := fr.File().Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return rc, nil //nolint:nilerr // no fast path: the chunks read it
	}
	if pos, err := fr.File().Seek(0, io.SeekCurrent); err != nil || pos != 0 {
		return rc, nil //nolint:nilerr // no fast path: the chunks read it
	}
	h := r.handover()
	fl := r.follow(ctx, st, fr.File(), func(err error) error {
		return r.source.fail(ctx, fmt.Errorf("source: %w", err))
	})
	progress := h.progress
	if fl != nil {
		// The follower starts with the first bytes sent: an object that
		// does not take the file sends none, and the chunks observe it.
		progress = func(k int64) { fl.advance(fi.Size()); h.progress(k) }
	}
	n, taken, err := direct.SendFile(w, fr.File(), fi.Size(), progress)
	if !taken {
		fl.stop()
		return rc, nil
	}
	// Before the check below: the follower may read the file after the
	// sink did, and what it read must be what the sink sent.
	if ferr := fl.close(ctx, n, err, res, &r.mu); ferr != nil {
		fr.Done(false)
		_ = rc.Close()
		return nil, ferr // the stage's failure or the source's, named so
	}
	if err == nil {
		// The sink read the size the file had when it began: a file that
		// changed meanwhile (a log still being written) would be stored
		// cut or mixed, so the object is not committed.
		if now, serr := fr.File().Stat(); serr != nil || now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
			err = &sdk.ReadError{Err: fmt.Errorf("the file changed while it was uploaded (%d bytes when it began): back it up once nothing writes to it", fi.Size())}
		}
	}
	fr.Done(err == nil)
	blame := r.sinks[0]
	if cerr := rc.Close(); err == nil && cerr != nil {
		err, blame = cerr, r.source // what the stream's end reported
	}
	return nil, h.end(ctx, st, res, n, err, blame)
}

// handover meters a direct stream that one endpoint moves to the other
// itself (fill, send): the source's and the sink's meters count each
// write as it lands, and the move counts as one chunk, busy throughout.
type handover struct {
	r       *Run
	start   time.Time
	counted atomic.Int64 // this stream's bytes in the meters
}

func (r *Run) handover() *handover { return &handover{r: r, start: time.Now()} }

func (h *handover) progress(k int64) {
	h.counted.Add(k)
	h.r.source.out.Add(k)
	h.r.sinks[0].in.Add(k)
}

// end books the move of n bytes (in res when it succeeded) and says whose
// failure err is: a file that could not be read is the source's
// (sdk.ReadError), one that could not be written the sink's
// (sdk.WriteError), any other blame's.
func (h *handover) end(ctx context.Context, st *Stream, res *StreamResult, n int64, err error, blame *Meter) error {
	src, snk := h.r.source, h.r.sinks[0]
	busy := int64(time.Since(h.start))
	src.busy.Add(busy)
	snk.busy.Add(busy)
	src.chunks.Add(1)
	snk.chunks.Add(1)
	if re := (*sdk.ReadError)(nil); errors.As(err, &re) {
		blame = src
	} else if we := (*sdk.WriteError)(nil); errors.As(err, &we) {
		blame = snk
	}
	switch {
	case err != nil && blame == src:
		return src.fail(ctx, fmt.Errorf("source: %w", err))
	case err != nil:
		return snk.fail(ctx, fmt.Errorf("sink %s: writing %q: %w", h.r.job.Sinks[0].Name, st.Objects[0].Key, err))
	}
	res.Read, res.Written = n, n
	// Progress may have been reported short of the end (a plugin's last
	// report): the meters end at the stream's size.
	if d := n - h.counted.Load(); d > 0 {
		src.out.Add(d)
		snk.in.Add(d)
	}
	return nil
}

// read fills pooled chunks from the source; opened, if not nil, is the
// stream, opened already.
func (r *Run) read(ctx context.Context, st *Stream, res *StreamResult, out chan<- *chunk, opened io.ReadCloser) error {
	defer close(out)
	m := r.source
	rc := opened
	if rc == nil {
		var err error
		if rc, err = r.open(ctx, st); err != nil {
			return err
		}
	}
	defer func() {
		if rc != nil {
			rc.Close()
		}
	}()
	var seq int64
	for {
		t := time.Now()
		buf, err := r.srcPool.get(ctx)
		m.addBlocked(t)
		if err != nil {
			return err
		}
		t = time.Now()
		var n int
		var rerr error
		var waited time.Duration // for the rate limit: blocked, not busy
		if r.srcLimit == nil {
			n, rerr = io.ReadFull(rc, buf[:r.job.ChunkSize])
		} else {
			n, waited, rerr = r.srcLimit.readFull(ctx, rc, buf[:r.job.ChunkSize])
		}
		m.busy.Add(int64(time.Since(t) - waited)) // one add: a counter never goes back
		m.blockedOut.Add(int64(waited))
		if n > 0 || (seq == 0 && rerr == io.EOF) {
			c := newChunk(r.srcPool, buf, seq)
			c.n = n
			seq++
			res.Read += int64(n)
			m.out.Add(int64(n))
			m.chunks.Add(1)
			t = time.Now()
			err := send(ctx, out, c)
			m.addBlocked(t)
			if err != nil {
				return err
			}
		} else {
			r.srcPool.put(buf)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("source: reading at byte %d: %w", res.Read, rerr)
		}
	}
	c := rc
	rc = nil
	t := time.Now()
	err := c.Close()
	m.addBusy(t)
	if err != nil {
		return fmt.Errorf("source: %w", err)
	}
	return nil
}

// runStreamer runs one stream through a Streamer stage.
func runStreamer(ctx context.Context, p Streamer, m *Meter, pools stagePools, in <-chan *chunk, out chan<- *chunk) error {
	defer close(out)
	t := time.Now()
	local := &Meter{} // this stream's share; m is shared by all streams
	r := &chunkReader{ctx: ctx, in: in, meter: local}
	w := &chunkWriter{ctx: ctx, pool: pools.out, size: pools.unit, meter: local,
		emit: func(c *chunk) error { return send(ctx, out, c) }}
	err := p.Stream(ctx, w, r)
	if err == nil {
		err = w.close()
	} else {
		w.discard()
	}
	var trailing int64
	if err == nil {
		trailing = r.close()
	} else {
		r.abandon()
	}
	waitIn, blocked := local.waitIn.Load(), local.blockedOut.Load()
	m.busy.Add(int64(time.Since(t)) - waitIn - blocked)
	m.waitIn.Add(waitIn)
	m.blockedOut.Add(blocked)
	m.in.Add(local.in.Load())
	m.out.Add(local.out.Load())
	m.chunks.Add(local.chunks.Load())
	if err != nil {
		return err
	}
	if trailing > 0 {
		return fmt.Errorf("%d bytes follow the end of the data: the input is corrupt or was tampered with", trailing)
	}
	return nil
}

// observe passes chunks through unchanged while an Observation sees them.
func observe(ctx context.Context, m *Meter, obs Observation, in <-chan *chunk, out chan<- *chunk) (string, error) {
	defer close(out)
	for {
		t := time.Now()
		var c *chunk
		var ok bool
		select {
		case c, ok = <-in:
		case <-ctx.Done():
			return "", context.Cause(ctx)
		}
		m.addWaitIn(t)
		if !ok {
			break
		}
		t = time.Now()
		_, err := obs.Write(c.data())
		m.addBusy(t)
		m.in.Add(int64(c.n))
		m.out.Add(int64(c.n))
		m.chunks.Add(1)
		if err != nil {
			c.release()
			return "", err
		}
		t = time.Now()
		err = send(ctx, out, c)
		m.addBlocked(t)
		if err != nil {
			return "", err
		}
	}
	return obs.Finish()
}

// distribute hands every chunk to every sink's writer.
func distribute(ctx context.Context, in <-chan *chunk, outs []chan *chunk, written *int64) error {
	defer func() {
		for _, o := range outs {
			close(o)
		}
	}()
	for {
		var c *chunk
		var ok bool
		select {
		case c, ok = <-in:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if !ok {
			return nil
		}
		*written += int64(c.n)
		c.refs.Store(int32(len(outs)))
		for k, o := range outs {
			if err := send(ctx, o, c); err != nil {
				for range outs[k+1:] {
					c.release()
				}
				return err
			}
		}
	}
}

// write feeds one sink's object, at most as fast as lim lets it (nil: no
// limit).
func write(ctx context.Context, m *Meter, lim *throttle, w sdk.ObjectWriter, in <-chan *chunk, name, key string) error {
	for {
		t := time.Now()
		var c *chunk
		var ok bool
		select {
		case c, ok = <-in:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		m.addWaitIn(t)
		if !ok {
			return nil
		}
		t = time.Now()
		var n int
		var err error
		var waited time.Duration // for the rate limit: blocked, not busy
		if lim == nil {
			n, err = w.Write(c.data())
		} else {
			n, waited, err = lim.write(ctx, w, c.data())
		}
		m.busy.Add(int64(time.Since(t) - waited)) // one add: a counter never goes back
		m.blockedOut.Add(int64(waited))
		m.in.Add(int64(n))
		m.chunks.Add(1)
		c.release()
		if err != nil {
			return fmt.Errorf("sink %s: writing %q: %w", name, key, err)
		}
	}
}
