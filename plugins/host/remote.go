package host

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"

	"github.com/pipebackup/pipe/internal/direct"
	"github.com/pipebackup/pipe/plugins/internal/pb"
	"github.com/pipebackup/pipe/plugins/internal/wire"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/sdk/ospipe"
)

// remoteType is an endpoint type served by a plugin process.
type remoteType struct {
	proc   *process
	kind   pb.Kind
	name   string
	schema sdk.Schema
}

func (t *remoteType) Schema() sdk.Schema { return t.schema }

// configure makes an instance in the plugin and returns its handle.
func (t *remoteType) configure(ctx context.Context, cfg sdk.Config) (*pb.Configure_Response, sdk.Diagnostics) {
	rpc, err := t.proc.conn()
	if err != nil {
		return nil, sdk.AttrError("", "plugin failed", err.Error())
	}
	values, err := wire.ConfigToPB(t.schema, cfg)
	if err != nil {
		return nil, sdk.AttrError("", "invalid configuration", err.Error())
	}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	resp, err := rpc.Configure(cctx, &pb.Configure_Request{Kind: t.kind, Type: t.name, Config: values})
	if err != nil {
		return nil, sdk.AttrError("", "plugin failed", t.proc.wrap(cctx, err).Error())
	}
	diags := wire.DiagsFromPB(resp.GetDiagnostics())
	if resp.GetHandle() == 0 && !diags.HasErrors() {
		diags = append(diags, sdk.AttrError("", "plugin failed", fmt.Sprintf("plugin %s made no %s", t.proc.name, t.name))...)
	}
	return resp, diags
}

type remoteSourceType struct{ remoteType }

func (t *remoteSourceType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Source, sdk.Diagnostics) {
	resp, diags := t.configure(ctx, cfg)
	if diags.HasErrors() {
		return nil, diags
	}
	s := &remoteSource{remote: remote{proc: t.proc, handle: resp.GetHandle()}, concluder: resp.GetConcluder()}
	if resp.GetChainer() {
		return &struct {
			*remoteSource
			chainer
		}{s, chainer{s}}, diags
	}
	return s, diags
}

type remoteSinkType struct{ remoteType }

func (t *remoteSinkType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	resp, diags := t.configure(ctx, cfg)
	if diags.HasErrors() {
		return nil, diags
	}
	s := &remoteSink{remote: remote{proc: t.proc, handle: resp.GetHandle()}, preparer: resp.GetPreparer(), locker: resp.GetLocker()}
	// Only what the instance can do shows as a capability.
	switch {
	case resp.GetComposer(): // a remover and a flusher too
		return &struct {
			*remoteSink
			remover
			flusher
			composer
		}{s, remover{s}, flusher{s}, composer{s}}, diags
	case resp.GetStorage() && resp.GetFlusher():
		return &struct {
			*remoteSink
			storage
			flusher
		}{s, storage{remover{s}}, flusher{s}}, diags
	case resp.GetStorage():
		return &struct {
			*remoteSink
			storage
		}{s, storage{remover{s}}}, diags
	case resp.GetRemover() && resp.GetFlusher():
		return &struct {
			*remoteSink
			remover
			flusher
		}{s, remover{s}, flusher{s}}, diags
	case resp.GetRemover():
		return &struct {
			*remoteSink
			remover
		}{s, remover{s}}, diags
	case resp.GetFlusher():
		return &struct {
			*remoteSink
			flusher
		}{s, flusher{s}}, diags
	}
	return s, diags
}

// remote is an instance in a plugin process.
type remote struct {
	proc   *process
	handle uint64
}

// Close releases the instance in the plugin.
func (r *remote) Close() error {
	if r.proc.rpc == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	_, err := r.proc.rpc.Close(ctx, &pb.Close_Request{Handle: r.handle})
	return r.proc.wrap(ctx, err)
}

type remoteSource struct {
	remote
	facts       map[string]string // from the last ListStreams
	single      bool              // from the last ListStreams
	independent bool              // from the last ListStreams
	concluder   bool              // the plugin's source answers Conclude
}

var (
	_ sdk.Source    = (*remoteSource)(nil)
	_ sdk.Describer = (*remoteSource)(nil)
	_ sdk.Concluder = (*remoteSource)(nil)
	_ sdk.Selection = (*remoteSource)(nil)
	_ direct.Filler = (*remoteSource)(nil)
)

// Fill has the plugin write the stream into f itself (see direct.Filler):
// pipe hands it the file, and it reports the bytes written as it goes, and
// how far the file is written without a gap (a plugin built before it
// said so reports 0: prefix is not told). A
// plugin that cannot take files has its stream read here, in order.
func (s *remoteSource) Fill(ctx context.Context, name string, f *os.File, progress, prefix func(int64)) (int64, error) {
	if !s.proc.fill || s.proc.fds == nil {
		rc, err := s.Open(ctx, name)
		if err != nil {
			return 0, err
		}
		return direct.FillFrom(ctx, rc, f, progress, prefix)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the plugin's side too, however this ends
	token := s.proc.tokens.Add(1)
	if err := s.proc.fds.Send(token, f); err != nil {
		return 0, fmt.Errorf("plugin %s: %w", s.proc.name, err)
	}
	st, err := s.proc.rpc.FillFile(ctx, &pb.FillFile_Request{Handle: s.handle, Name: name, Token: token})
	if err != nil {
		return 0, s.proc.wrap(ctx, err)
	}
	var told int64
	return s.proc.follow(ctx, "writing "+name, progress, func() (int64, bool, error, error) {
		resp, err := st.Recv()
		// Never past what it says it wrote: a plugin that told more
		// would have holes read as zeros for the digest.
		if p := min(resp.GetPrefix(), resp.GetWritten()); prefix != nil && p > told {
			told = p
			prefix(p)
		}
		if msg := resp.GetWriteError(); msg != "" {
			return resp.GetWritten(), true, &sdk.WriteError{Err: errors.New(msg)}, nil
		}
		return resp.GetWritten(), resp.GetDone(), nil, err
	})
}

// errUnsupported is a plugin's answer that it cannot do what was asked,
// and did nothing.
var errUnsupported = errors.New("unsupported")

// follow reads a plugin's answers to a call that reports progress, until
// the last one: next returns the bytes done so far, whether the answer is
// the last, the failure it reports, and the call's error. progress gets
// what each answer adds.
func (p *process) follow(ctx context.Context, what string, progress func(int64), next func() (done int64, last bool, failed, err error)) (int64, error) {
	var reported int64
	for {
		done, last, failed, err := next()
		if err == io.EOF {
			return reported, fmt.Errorf("plugin %s ended %s without saying it was done", p.name, what)
		}
		if err != nil {
			return reported, p.wrap(ctx, err)
		}
		if k := done - reported; k > 0 {
			if progress != nil {
				progress(k)
			}
			reported = done
		}
		if failed != nil {
			return reported, failed
		}
		if last {
			return reported, nil
		}
	}
}

// Describe returns the facts the plugin sent with the streams.
func (s *remoteSource) Describe(context.Context) (map[string]string, error) { return s.facts, nil }

// Conclude asks the plugin for the facts it learned by reading the streams
// (see sdk.Concluder), when its source said it has some.
func (s *remoteSource) Conclude(ctx context.Context) (map[string]string, error) {
	if !s.concluder {
		return nil, nil
	}
	resp, err := s.proc.rpc.Conclude(ctx, &pb.Conclude_Request{Handle: s.handle})
	if err != nil {
		return nil, s.proc.wrap(ctx, err)
	}
	return resp.GetFacts(), nil
}

// Single says what the plugin said with the streams (see sdk.Selection).
func (s *remoteSource) Single() bool { return s.single }

// Independent says what the plugin said with the streams (see
// sdk.Independent).
func (s *remoteSource) Independent() bool { return s.independent }

func (s *remoteSource) Streams(ctx context.Context) ([]sdk.StreamInfo, error) {
	resp, err := s.proc.rpc.ListStreams(ctx, &pb.ListStreams_Request{Handle: s.handle})
	if err != nil {
		return nil, s.proc.wrap(ctx, err)
	}
	s.facts, s.single, s.independent = resp.GetFacts(), resp.GetSingle(), resp.GetIndependent()
	out := make([]sdk.StreamInfo, 0, len(resp.GetStreams()))
	for _, in := range resp.GetStreams() {
		out = append(out, sdk.StreamInfo{Name: in.GetName(), Size: in.GetSize()})
	}
	return out, nil
}

func (s *remoteSource) Open(ctx context.Context, name string) (io.ReadCloser, error) {
	return s.remote.open(ctx, name)
}

// OpenRange reads part of a stream (see sdk.RangeOpener); the plugin reads
// it with its own OpenRange, or skips to it.
func (s *remote) OpenRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	return s.read(ctx, &pb.ReadStream_Request{Handle: s.handle, Name: name, Offset: offset, Length: length})
}

// open reads a stream of the instance: a source's stream or a storage
// sink's object.
func (s *remote) open(ctx context.Context, name string) (io.ReadCloser, error) {
	return s.read(ctx, &pb.ReadStream_Request{Handle: s.handle, Name: name, AcceptFd: s.proc.fds != nil})
}

func (s *remote) read(ctx context.Context, req *pb.ReadStream_Request) (io.ReadCloser, error) {
	ctx, cancel := s.proc.whileAlive(ctx)
	st, err := s.proc.rpc.ReadStream(ctx, req)
	if err != nil {
		cancel()
		return nil, s.proc.wrap(ctx, err)
	}
	r := &reader{ctx: ctx, cancel: cancel, st: st, proc: s.proc}
	// The first message says whether the stream opened at all, and whether
	// it is a file pipe reads itself.
	if err := r.fill(); err != nil && err != io.EOF {
		cancel()
		return nil, err
	}
	if r.file != nil {
		f, err := s.proc.fds.Take(ctx, r.file.GetToken())
		if err != nil {
			cancel()
			return nil, s.proc.wrap(ctx, err)
		}
		fr := &fileReader{reader: r, f: f, stop: context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Now()) })}
		if ospipe.IsPipe(f) {
			// A program's output (pg_dump's) or a plugin's pump: read in
			// batches, outside the poller (see ospipe).
			fr.pipe = ospipe.NewReader(ctx, f)
		}
		return fr, nil
	}
	return r, nil
}

// fileReader reads a stream's file directly (see sdk.FileReader); the
// plugin learns how reading ended, and says whether the stream ended well,
// when the file ends or at Close.
type fileReader struct {
	*reader
	f      *os.File
	stop   func() bool
	eof    bool
	ended  bool
	endErr error
	lost   bool           // the plugin did not answer FinishFile (it died)
	pipe   *ospipe.Reader // f, when it is a pipe (closed through it)
}

var _ sdk.FileReader = (*fileReader)(nil)

// File is the stream's file, for whoever reads it otherwise than by Read
// (direct.SendFile hands it to a sink); Done then says whether it was read to
// the end.
func (r *fileReader) File() *os.File { return r.f }
func (r *fileReader) Done(eof bool)  { r.eof = eof }

func (r *fileReader) Read(p []byte) (int, error) {
	if r.ended {
		if r.endErr != nil {
			return 0, r.endErr
		}
		return 0, io.EOF
	}
	if err := r.ctx.Err(); err != nil {
		return 0, context.Cause(r.ctx)
	}
	var n int
	var err error
	if r.pipe != nil {
		n, err = r.pipe.Read(p)
	} else {
		n, err = r.f.Read(p)
	}
	switch {
	case err == io.EOF:
		// The file's end is the stream's only if the plugin says so. A
		// plugin that died fails the read at once; what the stream
		// reported at its end (a read that failed there, a command's
		// exit status) is Close's answer, as for every stream.
		r.eof = true
		if eerr := r.end(); eerr != nil && r.lost {
			return n, eerr
		}
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = context.Cause(r.ctx)
	}
	return n, err
}

// Close tells the plugin how reading ended, then returns what closing the
// stream reported there (a command's exit status, say).
func (r *fileReader) Close() error { return r.end() }

// end closes the file, tells the plugin how reading ended and returns
// what the stream's End reported; only the first call asks.
func (r *fileReader) end() error {
	if r.ended {
		return r.endErr
	}
	r.ended = true
	defer r.cancel() // the call ends with the stream, however it went
	r.stop()
	if r.pipe != nil {
		r.pipe.Close() // stops a read in progress first
	} else {
		r.f.Close()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), callTimeout)
	defer cancel()
	if _, err := r.proc.rpc.FinishFile(ctx, &pb.FinishFile_Request{Token: r.file.GetToken(), Eof: r.eof}); err != nil && r.ctx.Err() == nil {
		r.lost = true
		r.endErr = r.proc.wrap(ctx, err)
		return r.endErr
	}
	if r.ctx.Err() != nil {
		return nil
	}
	// The End carries the close error. No End is a plugin lost after it
	// answered FinishFile: one whose stream panicked closes the file as it
	// unwinds, then dies.
	if r.endErr = r.reader.awaitEnd(); r.endErr != nil {
		r.lost = true
		return r.endErr
	}
	r.endErr = r.reader.Close()
	return r.endErr
}

// reader reads a stream from a plugin.
type reader struct {
	ctx    context.Context
	cancel context.CancelFunc
	st     pb.Plugin_ReadStreamClient
	proc   *process
	buf    []byte
	end    *pb.ReadStream_End
	file   *pb.FileRef // the stream is this file
	err    error
}

// awaitEnd receives the End that follows a file the host read itself.
func (r *reader) awaitEnd() error {
	for r.end == nil {
		msg, err := r.st.Recv()
		if err != nil {
			return r.proc.wrap(r.ctx, err)
		}
		if e, ok := msg.GetMsg().(*pb.ReadStream_Response_End); ok {
			r.end = e.End
		}
	}
	return nil
}

// fill receives the next message; at the End it returns io.EOF.
func (r *reader) fill() error {
	if r.err != nil {
		return r.err
	}
	for len(r.buf) == 0 {
		if r.end != nil {
			return io.EOF
		}
		msg, err := r.st.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("plugin %s ended the stream without its end marker", r.proc.name)
			} else {
				err = r.proc.wrap(r.ctx, err)
			}
			r.err = err
			return err
		}
		switch m := msg.GetMsg().(type) {
		case *pb.ReadStream_Response_Data:
			r.buf = m.Data
		case *pb.ReadStream_Response_End:
			r.end = m.End
		case *pb.ReadStream_Response_File:
			r.file = m.File
			return nil
		}
	}
	return nil
}

func (r *reader) Read(p []byte) (int, error) {
	if err := r.fill(); err != nil {
		return 0, err
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// Close ends the call; at the end of the stream it returns what closing
// the stream reported in the plugin (a command's exit status, say).
func (r *reader) Close() error {
	if r.end == nil {
		r.cancel() // stopped early: the plugin's source is cancelled
		return nil
	}
	r.cancel()
	if msg := r.end.GetError(); msg != "" {
		return errors.New(msg)
	}
	return nil
}

type remoteSink struct {
	remote
	preparer bool   // the plugin wants Prepare
	locker   bool   // the instance answers ObjectLock
	declined []bool // its answer to Prepare
}

var (
	_ sdk.Sink            = (*remoteSink)(nil)
	_ sdk.Preparer        = (*remoteSink)(nil)
	_ sdk.PartialPreparer = (*remoteSink)(nil)
	_ sdk.Chooser         = (*remoteSink)(nil)
)

func (s *remoteSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	o := wire.ObjectToPB(obj)
	openMsg := &pb.WriteObject_Open{Handle: s.handle, Object: o}
	if s.proc.fds != nil {
		resp, err := s.proc.rpc.CreateObject(ctx, &pb.CreateObject_Request{Handle: s.handle, Object: o, AcceptFd: true})
		if err != nil {
			return nil, s.proc.wrap(ctx, err)
		}
		if resp.GetFile() {
			f, err := s.proc.fds.Take(ctx, resp.GetToken())
			if err != nil {
				_ = s.finishObject(resp.GetToken(), false)
				return nil, s.proc.wrap(ctx, err)
			}
			return newFileWriter(ctx, s, resp.GetToken(), f, obj.Key), nil
		}
		openMsg = &pb.WriteObject_Open{Token: resp.GetToken()}
	}
	ctx, cancel := context.WithCancel(ctx)
	st, err := s.proc.rpc.WriteObject(ctx)
	if err != nil {
		cancel()
		return nil, s.proc.wrap(ctx, err)
	}
	open := &pb.WriteObject_Request{Msg: &pb.WriteObject_Request_Open{Open: openMsg}}
	w := &writer{ctx: ctx, cancel: cancel, st: st, proc: s.proc}
	if err := st.Send(open); err != nil {
		cancel()
		return nil, w.result(err)
	}
	return w, nil
}

// writer sends an object to a plugin. gRPC's flow control blocks Write
// when the plugin falls behind: that is the backpressure across processes.
type writer struct {
	ctx    context.Context
	cancel context.CancelFunc
	st     pb.Plugin_WriteObjectClient
	proc   *process
	done   bool
}

func (w *writer) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), wire.MaxData)
		if err := w.st.Send(&pb.WriteObject_Request{Msg: &pb.WriteObject_Request_Data{Data: p[:n]}}); err != nil {
			w.done = true
			return written, w.result(err)
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// result gets the plugin's verdict after a failed Send: the call ended, and
// its status says why.
func (w *writer) result(sendErr error) error {
	_, err := w.st.CloseAndRecv()
	w.cancel()
	if err == nil {
		err = sendErr
	}
	return w.proc.wrap(w.ctx, err)
}

func (w *writer) finish(commit bool) error {
	if w.done {
		if commit {
			return errors.New("the object was already aborted")
		}
		return nil
	}
	w.done = true
	if err := w.st.Send(&pb.WriteObject_Request{Msg: &pb.WriteObject_Request_Finish{Finish: &pb.WriteObject_Finish{Commit: commit}}}); err != nil {
		return w.result(err)
	}
	_, err := w.st.CloseAndRecv()
	w.cancel()
	return w.proc.wrap(w.ctx, err)
}

func (w *writer) Commit(ctx context.Context) error { return w.finish(true) }

// Abort tells the plugin to discard the object; if the call is broken,
// cancelling it makes the plugin abort on its side.
func (w *writer) Abort(ctx context.Context) error {
	if w.ctx.Err() != nil {
		w.done = true
		w.cancel()
		return nil //nolint:nilerr // the cancelled call makes the plugin abort
	}
	err := w.finish(false)
	w.cancel()
	return err
}

// storage lists, reads back and removes a storage sink's objects.
type storage struct {
	remover
}

func (st storage) List(ctx context.Context, prefix string) ([]sdk.ObjectInfo, error) {
	resp, err := st.s.proc.rpc.ListObjects(ctx, &pb.ListObjects_Request{Handle: st.s.handle, Prefix: prefix})
	if err != nil {
		return nil, st.s.proc.wrap(ctx, err)
	}
	out := make([]sdk.ObjectInfo, 0, len(resp.GetObjects()))
	for _, o := range resp.GetObjects() {
		out = append(out, sdk.ObjectInfo{Key: o.GetKey(), Size: o.GetSize(), Modified: time.Unix(0, o.GetModifiedUnixNs())})
	}
	return out, nil
}

func (st storage) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	return st.s.remote.open(ctx, key)
}

// ObjectLock asks a sink that locks objects how one is locked; one that
// does not answers that nothing is (see sdk.Locker).
func (st storage) ObjectLock(ctx context.Context, key string) (sdk.Lock, error) {
	if !st.s.locker {
		return sdk.Lock{}, nil
	}
	resp, err := st.s.proc.rpc.ObjectLock(ctx, &pb.ObjectLock_Request{Handle: st.s.handle, Key: key})
	if err != nil {
		return sdk.Lock{}, st.s.proc.wrap(ctx, err)
	}
	l := sdk.Lock{Mode: resp.GetMode(), LegalHold: resp.GetLegalHold()}
	if ns := resp.GetRetainUntilUnixNs(); ns != 0 {
		l.Until = time.Unix(0, ns)
	}
	return l, nil
}

type remover struct{ s *remoteSink }

func (r remover) Remove(ctx context.Context, key string) error {
	_, err := r.s.proc.rpc.Remove(ctx, &pb.Remove_Request{Handle: r.s.handle, Key: key})
	return r.s.proc.wrap(ctx, err)
}

// Prepare sends the run's objects to a sink that asked for them.
func (s *remoteSink) Prepare(ctx context.Context, objs []sdk.Object) error {
	_, err := s.PreparePartial(ctx, objs, nil)
	return err
}

// PreparePartial sends the run's objects and the streams that failed in
// the backup (see sdk.PartialPreparer) to a sink that asked for them. A
// plugin that does not answer for the failed streams (one built before
// the field) leaves wanted nil: every one counts.
func (s *remoteSink) PreparePartial(ctx context.Context, objs []sdk.Object, failed []string) ([]bool, error) {
	if !s.preparer {
		return nil, nil
	}
	req := &pb.Prepare_Request{Handle: s.handle, Failed: failed}
	for _, o := range objs {
		req.Objects = append(req.Objects, wire.ObjectToPB(o))
	}
	resp, err := s.proc.rpc.Prepare(ctx, req)
	if err != nil {
		return nil, s.proc.wrap(ctx, err)
	}
	s.declined = resp.GetDeclined()
	if w := resp.GetWanted(); len(w) == len(failed) && len(failed) > 0 {
		return w, nil
	}
	return nil, nil
}

// Declines says what the plugin declined in its answer to Prepare (see
// sdk.Chooser).
func (s *remoteSink) Declines(objs []sdk.Object) []bool {
	if len(s.declined) != len(objs) {
		return nil
	}
	return s.declined
}

type flusher struct{ s *remoteSink }

func (f flusher) Flush(ctx context.Context) error {
	_, err := f.s.proc.rpc.Flush(ctx, &pb.Flush_Request{Handle: f.s.handle})
	return f.s.proc.wrap(ctx, err)
}

// finishObject commits or aborts an object made by CreateObject.
func (s *remoteSink) finishObject(token uint64, commit bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	_, err := s.proc.rpc.FinishObject(ctx, &pb.FinishObject_Request{Token: token, Commit: commit})
	return s.proc.wrap(ctx, err)
}

// fileWriter writes an object's file directly (see sdk.FileWriter): in
// pieces of at most 1 MiB, starting the disk writeback of regular files as
// it goes (as the fs sink does), and hands commit or abort to the plugin
// after closing its copy of the file.
type fileWriter struct {
	ctx     context.Context
	s       *remoteSink
	token   uint64
	f       *os.File
	key     string
	regular bool
	off     int64
	started int64
	stop    func() bool
	done    bool
	pipe    *ospipe.Writer // f, when it is a pipe (closed through it)
}

func newFileWriter(ctx context.Context, s *remoteSink, token uint64, f *os.File, key string) *fileWriter {
	w := &fileWriter{ctx: ctx, s: s, token: token, f: f, key: key}
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		w.regular = true
	}
	w.stop = context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Now()) })
	if ospipe.IsPipe(f) {
		// A program's input (pg_restore's) or a plugin's pump: written
		// in batches (see ospipe).
		w.pipe = ospipe.NewWriter(ctx, f)
	}
	return w
}

func (w *fileWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if err := w.ctx.Err(); err != nil {
			return written, context.Cause(w.ctx)
		}
		var n int
		var err error
		if w.pipe != nil {
			n, err = w.pipe.Write(p)
		} else {
			n, err = w.f.Write(p[:min(len(p), wire.MaxData)])
		}
		written += n
		w.off += int64(n)
		p = p[n:]
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return written, context.Cause(w.ctx)
			}
			if errors.Is(err, syscall.EPIPE) {
				// The plugin stopped reading: aborting the object tells
				// why, when the plugin knows (an upload that failed).
				if ferr := w.finish(false); ferr != nil {
					return written, ferr
				}
			}
			if w.ctx.Err() != nil {
				return written, context.Cause(w.ctx)
			}
			return written, fmt.Errorf("writing %s: %w", w.key, sdk.ExplainIO(err))
		}
	}
	if w.regular && w.off-w.started >= 4<<20 {
		sdk.StartWriteback(w.f, w.started, w.off-w.started)
		w.started = w.off
	}
	return written, nil
}

func (w *fileWriter) finish(commit bool) error {
	if w.done {
		if commit {
			return errors.New("the object was already aborted")
		}
		return nil
	}
	w.done = true
	w.stop()
	if w.pipe != nil {
		w.pipe.Close() // stops a write in progress (Abort of a stuck object) first
	} else {
		w.f.Close()
	}
	if commit && w.ctx.Err() != nil {
		_ = w.s.finishObject(w.token, false)
		return fmt.Errorf("not committing %s: %w", w.key, context.Cause(w.ctx))
	}
	return w.s.finishObject(w.token, commit)
}

// File is the object's file: a source may write it itself (direct.Fill).
func (w *fileWriter) File() *os.File { return w.f }

// SendFile has the plugin's object take its bytes from f itself (see
// direct.FileSender): pipe hands it the file, and it reports the bytes sent
// as it goes. Only for an object written through a pipe (an upload), and
// a plugin that serves SendFile; an object that cannot is untouched.
func (w *fileWriter) SendFile(f *os.File, size int64, progress func(int64)) (int64, bool, error) {
	proc := w.s.proc
	if w.regular || !proc.send || proc.fds == nil || w.off > 0 {
		return 0, false, nil
	}
	ctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	token := proc.tokens.Add(1)
	if err := proc.fds.Send(token, f); err != nil {
		return 0, false, nil // the file stays here: write the object as always
	}
	st, err := proc.rpc.SendFile(ctx, &pb.SendFile_Request{Token: w.token, File: token, Size: size})
	if err != nil {
		return 0, true, proc.wrap(ctx, err)
	}
	n, err := proc.follow(ctx, "sending "+w.key, progress, func() (int64, bool, error, error) {
		resp, err := st.Recv()
		switch {
		case resp.GetUnsupported():
			return 0, true, errUnsupported, nil
		case resp.GetReadError() != "":
			return resp.GetSent(), true, &sdk.ReadError{Err: errors.New(resp.GetReadError())}, nil
		}
		return resp.GetSent(), resp.GetDone(), nil, err
	})
	if err == errUnsupported {
		return 0, false, nil
	}
	return n, true, err
}

func (w *fileWriter) Commit(ctx context.Context) error { return w.finish(true) }
func (w *fileWriter) Abort(ctx context.Context) error  { return w.finish(false) }

// Memory asks the plugin what an instance with cfg buffers on its own.
func (t *remoteType) Memory(cfg sdk.Config, streams int) int64 {
	rpc, err := t.proc.conn()
	if err != nil {
		return 0
	}
	values, err := wire.ConfigToPB(t.schema, cfg)
	if err != nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	resp, err := rpc.EstimateMemory(ctx, &pb.EstimateMemory_Request{Kind: t.kind, Type: t.name, Config: values, Streams: int32(streams)})
	if err != nil {
		return 0
	}
	return resp.GetBytes()
}
