package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pipebackup/pipe/internal/direct"
	"github.com/pipebackup/pipe/plugins/internal/fdsock"
	"github.com/pipebackup/pipe/plugins/internal/pb"
	"github.com/pipebackup/pipe/plugins/internal/wire"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// server serves a plugin's endpoint types over the protocol.
type server struct {
	pb.UnimplementedPluginServer
	p       sdk.Plugin
	schemas map[string]*pb.Endpoint // by kind/type

	mu        sync.Mutex
	next      uint64
	instances map[uint64]any // sdk.Source or sdk.Sink
	secrets   map[uint64][]string
	writes    sync.WaitGroup // WriteObject calls in progress

	fds     *fdsock.Conn              // nil: everything goes in messages
	tokens  atomic.Uint64             // for files handed over and objects made
	reading map[uint64]chan bool      // files pipe reads, by token: whether it read to the end
	objects map[uint64]*pendingObject // objects made by CreateObject, by token
}

// pendingObject is an object made by CreateObject and not finished yet. It
// lives until FinishObject (or WriteObject) ends it.
type pendingObject struct {
	w      sdk.ObjectWriter
	handle uint64
	cancel context.CancelFunc
}

// secretValues returns the values of the secret attributes of cfg, longest
// first, so that no error an endpoint returns repeats them.
func secretValues(schema *pb.Schema, cfg sdk.Config) []string {
	var out []string
	for _, a := range schema.GetAttributes() {
		if !a.GetSecret() {
			continue
		}
		v, _ := cfg.Get(a.GetName())
		out = append(out, sdk.SecretStrings(v)...)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

func scrub(msg string, secrets []string) string { return sdk.Scrub(msg, secrets...) }

// status turns an instance's error into a gRPC status without its secrets.
func (s *server) status(h uint64, err error) error {
	if err == nil {
		return nil
	}
	s.mu.Lock()
	secrets := s.secrets[h]
	s.mu.Unlock()
	if len(secrets) == 0 {
		return wire.ToStatus(err)
	}
	st := status.Convert(wire.ToStatus(err))
	return status.Error(st.Code(), scrub(st.Message(), secrets))
}

func newServer(p sdk.Plugin) (*server, error) {
	s := &server{p: p, schemas: map[string]*pb.Endpoint{}, instances: map[uint64]any{}, secrets: map[uint64][]string{},
		fds: fdsock.FromEnv(wire.FDEnv), reading: map[uint64]chan bool{}, objects: map[uint64]*pendingObject{}}
	add := func(kind pb.Kind, name string, schema sdk.Schema) error {
		if err := schema.Validate(); err != nil {
			return fmt.Errorf("%s %q: %w", kindName(kind), name, err)
		}
		ps, err := wire.SchemaToPB(schema)
		if err != nil {
			return fmt.Errorf("%s %q: %w", kindName(kind), name, err)
		}
		s.schemas[key(kind, name)] = &pb.Endpoint{Kind: kind, Type: name, Schema: ps}
		return nil
	}
	for n, t := range p.Sources {
		if err := add(pb.Kind_KIND_SOURCE, n, t.Schema()); err != nil {
			return nil, err
		}
	}
	for n, t := range p.Sinks {
		if err := add(pb.Kind_KIND_SINK, n, t.Schema()); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func key(kind pb.Kind, name string) string { return kindName(kind) + "/" + name }

func kindName(k pb.Kind) string {
	if k == pb.Kind_KIND_SINK {
		return "sink"
	}
	return "source"
}

func (s *server) GetSchema(ctx context.Context, _ *pb.GetSchema_Request) (*pb.GetSchema_Response, error) {
	out := &pb.GetSchema_Response{Name: s.p.Name, Version: s.p.Version, FillFile: s.fds != nil, SendFile: s.fds != nil}
	keys := make([]string, 0, len(s.schemas))
	for k := range s.schemas {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out.Endpoints = append(out.Endpoints, s.schemas[k])
	}
	return out, nil
}

func (s *server) Configure(ctx context.Context, req *pb.Configure_Request) (*pb.Configure_Response, error) {
	ep, ok := s.schemas[key(req.GetKind(), req.GetType())]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "plugin %s has no %s type %q", s.p.Name, kindName(req.GetKind()), req.GetType())
	}
	cfg := wire.ConfigFromPB(req.GetConfig())
	var inst any
	var diags sdk.Diagnostics
	switch req.GetKind() {
	case pb.Kind_KIND_SOURCE:
		src, d := s.p.Sources[req.GetType()].Configure(ctx, cfg)
		inst, diags = src, d
	default:
		snk, d := s.p.Sinks[req.GetType()].Configure(ctx, cfg)
		inst, diags = snk, d
	}
	secrets := secretValues(ep.GetSchema(), cfg)
	resp := &pb.Configure_Response{Diagnostics: wire.DiagsToPB(diags)}
	for _, d := range resp.Diagnostics {
		d.Summary, d.Detail = scrub(d.Summary, secrets), scrub(d.Detail, secrets)
	}
	if diags.HasErrors() || inst == nil {
		if !diags.HasErrors() {
			resp.Diagnostics = append(resp.Diagnostics, &pb.Diagnostic{Summary: fmt.Sprintf("%s %q returned no instance", kindName(ep.Kind), ep.Type)})
		}
		return resp, nil
	}
	_, resp.Remover = inst.(sdk.Remover)
	_, resp.Flusher = inst.(sdk.Flusher)
	_, resp.Storage = inst.(sdk.Storage)
	_, resp.Preparer = inst.(sdk.Preparer)
	_, resp.Concluder = inst.(sdk.Concluder)
	_, resp.Locker = inst.(sdk.Locker)
	_, resp.Chainer = inst.(sdk.Chainer)
	_, composer := inst.(sdk.Composer)
	_, remover := inst.(sdk.Remover)
	resp.Composer = composer && remover && resp.Flusher
	s.mu.Lock()
	s.next++
	resp.Handle = s.next
	s.instances[s.next] = inst
	s.secrets[s.next] = secrets
	s.mu.Unlock()
	return resp, nil
}

func (s *server) instance(h uint64) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	inst, ok := s.instances[h]
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "no endpoint instance %d (closed or never configured)", h)
	}
	return inst, nil
}

// opener opens streams: a source's, or a storage sink's objects.
type opener interface {
	Open(ctx context.Context, name string) (io.ReadCloser, error)
}

func (s *server) source(h uint64) (sdk.Source, error) {
	inst, err := s.instance(h)
	if err != nil {
		return nil, err
	}
	src, ok := inst.(sdk.Source)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "instance %d is not a source", h)
	}
	return src, nil
}

func (s *server) opener(h uint64) (opener, error) {
	inst, err := s.instance(h)
	if err != nil {
		return nil, err
	}
	o, ok := inst.(opener)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "instance %d cannot open streams", h)
	}
	return o, nil
}

func (s *server) sink(h uint64) (sdk.Sink, error) {
	inst, err := s.instance(h)
	if err != nil {
		return nil, err
	}
	snk, ok := inst.(sdk.Sink)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "instance %d is not a sink", h)
	}
	return snk, nil
}

func (s *server) ListStreams(ctx context.Context, req *pb.ListStreams_Request) (*pb.ListStreams_Response, error) {
	src, err := s.source(req.GetHandle())
	if err != nil {
		return nil, err
	}
	infos, err := src.Streams(ctx)
	if err != nil {
		return nil, s.status(req.GetHandle(), err)
	}
	out := &pb.ListStreams_Response{}
	for _, in := range infos {
		out.Streams = append(out.Streams, &pb.StreamInfo{Name: in.Name, Size: in.Size})
	}
	if d, ok := src.(sdk.Describer); ok {
		if out.Facts, err = d.Describe(ctx); err != nil {
			return nil, s.status(req.GetHandle(), err)
		}
	}
	if sel, ok := src.(sdk.Selection); ok {
		out.Single = sel.Single()
	}
	if ind, ok := src.(sdk.Independent); ok {
		out.Independent = ind.Independent()
	}
	return out, nil
}

// ReadStream sends the stream in messages of up to wire.MaxData bytes. The
// host cancelling the call cancels the context the source was opened with.
func (s *server) ReadStream(req *pb.ReadStream_Request, out pb.Plugin_ReadStreamServer) error {
	src, err := s.opener(req.GetHandle())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(out.Context())
	defer cancel()
	h := req.GetHandle()
	var rc io.ReadCloser
	if req.GetLength() > 0 {
		rc, err = sdk.OpenRange(ctx, src, req.GetName(), req.GetOffset(), req.GetLength())
	} else {
		rc, err = src.Open(ctx, req.GetName())
	}
	if err != nil {
		return s.status(h, err)
	}
	if req.GetAcceptFd() && s.fds != nil && req.GetLength() == 0 {
		fr, ok := rc.(sdk.FileReader)
		if !ok {
			// No file: pipe reads the stream through a pipe instead.
			if fr, err = pipeStream(rc, cancel); err == nil {
				ok = true
			}
		}
		if ok {
			return s.readFile(h, fr, out)
		}
	}
	buf := make([]byte, wire.MaxData)
	for {
		n, rerr := io.ReadFull(rc, buf)
		if n > 0 {
			if err := out.Send(&pb.ReadStream_Response{Msg: &pb.ReadStream_Response_Data{Data: buf[:n]}}); err != nil {
				rc.Close()
				return err
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			rc.Close()
			return s.status(h, rerr)
		}
	}
	end := &pb.ReadStream_End{}
	if err := rc.Close(); err != nil {
		end.Error = status.Convert(s.status(h, err)).Message()
	}
	return out.Send(&pb.ReadStream_Response{Msg: &pb.ReadStream_Response_End{End: end}})
}

// progressEvery is how often FillFile and SendFile report the bytes moved
// so far.
const progressEvery = 100 * time.Millisecond

// handedFile takes the file pipe sent under token for a call that
// ctx belongs to.
func (s *server) handedFile(ctx context.Context, token uint64) (*os.File, error) {
	if s.fds == nil {
		return nil, status.Error(codes.FailedPrecondition, "this plugin process has no descriptor socket to take the file from")
	}
	f, err := s.fds.Take(ctx, token)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return f, nil
}

// FillFile writes a source's stream into the file pipe handed over (see
// direct.Fill), reporting the bytes written as it goes. Pipe ending the call
// cancels the context the stream was opened with.
func (s *server) FillFile(req *pb.FillFile_Request, out pb.Plugin_FillFileServer) error {
	h := req.GetHandle()
	ctx, cancel := context.WithCancel(out.Context())
	defer cancel()
	// The file first, whatever follows: one left on the socket stays open.
	f, err := s.handedFile(ctx, req.GetToken())
	if err != nil {
		return err
	}
	defer f.Close()
	src, err := s.source(h)
	if err != nil {
		return err
	}
	var prefix atomic.Int64 // how far the file is written without a gap
	n, written, err := report(cancel, func(progress func(int64)) (int64, error) {
		return direct.Fill(ctx, src, req.GetName(), f, progress, prefix.Store)
	}, func(written int64) error {
		return out.Send(&pb.FillFile_Response{Written: written, Prefix: prefix.Load()})
	})
	if we := (*sdk.WriteError)(nil); errors.As(err, &we) {
		return out.Send(&pb.FillFile_Response{Written: written, Prefix: prefix.Load(), WriteError: status.Convert(s.status(h, err)).Message()})
	}
	if err != nil {
		return s.status(h, err)
	}
	return out.Send(&pb.FillFile_Response{Written: n, Prefix: prefix.Load(), Done: true})
}

// SendFile has an object take its bytes from the file pipe handed over
// (sdk.ReaderAtFrom), reporting the bytes sent as it goes; an object that
// cannot is left as it was, and pipe writes it as always.
func (s *server) SendFile(req *pb.SendFile_Request, out pb.Plugin_SendFileServer) error {
	ctx, cancel := context.WithCancel(out.Context())
	defer cancel()
	f, err := s.handedFile(ctx, req.GetFile())
	if err != nil {
		return err
	}
	defer f.Close()
	s.mu.Lock()
	obj, ok := s.objects[req.GetToken()]
	s.mu.Unlock()
	if !ok {
		return status.Errorf(codes.NotFound, "no object %d is being written", req.GetToken())
	}
	w := obj.w
	po, piped := w.(*pipedObject)
	if piped {
		w = po.w
	}
	if _, ok := w.(sdk.ReaderAtFrom); !ok {
		return out.Send(&pb.SendFile_Response{Unsupported: true})
	}
	if piped {
		if err := po.detach(); err != nil {
			return s.status(obj.handle, err)
		}
	}
	// Pipe ending the call early (cancelled) stops the upload here too:
	// the object is aborted at once, not only by FinishObject later.
	stop := context.AfterFunc(ctx, func() { w.Abort(context.Background()) })
	defer stop()
	n, sent, err := report(cancel, func(progress func(int64)) (int64, error) {
		n, _, err := direct.SendFile(w, f, req.GetSize(), progress)
		return n, err
	}, func(sent int64) error { return out.Send(&pb.SendFile_Response{Sent: sent}) })
	if re := (*sdk.ReadError)(nil); errors.As(err, &re) {
		return out.Send(&pb.SendFile_Response{Sent: sent, ReadError: status.Convert(s.status(obj.handle, re.Err)).Message()})
	}
	if err != nil {
		return s.status(obj.handle, err)
	}
	return out.Send(&pb.SendFile_Response{Sent: n, Done: true})
}

// report runs work, which reports the bytes it moves to progress, and
// tells the total so far every progressEvery until work returns; it
// returns work's answer and the bytes moved. A failed tell (pipe went
// away) cancels the work's context and waits for it.
func report(cancel context.CancelFunc, work func(progress func(int64)) (int64, error), tell func(moved int64) error) (n, moved int64, err error) {
	var counted atomic.Int64
	var wn int64
	var werr error
	done := make(chan struct{})
	go func() {
		wn, werr = work(func(k int64) { counted.Add(k) })
		close(done) // not deferred: a panic must kill the process, not look done
	}()
	tick := time.NewTicker(progressEvery)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return wn, counted.Load(), werr
		case <-tick.C:
			if terr := tell(counted.Load()); terr != nil {
				cancel()
				<-done
				return wn, counted.Load(), terr
			}
		}
	}
}

// readFile hands the stream's file to pipe, waits until pipe has read it
// (FinishFile) or gave up (the call ends), then closes the stream and sends
// the End.
func (s *server) readFile(h uint64, fr sdk.FileReader, out pb.Plugin_ReadStreamServer) error {
	done := make(chan bool, 1)
	token := s.tokens.Add(1)
	if err := s.fds.Send(token, fr.File()); err != nil {
		fr.Close()
		return s.status(h, err)
	}
	s.mu.Lock()
	s.reading[token] = done
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.reading, token)
		s.mu.Unlock()
	}()
	if err := out.Send(&pb.ReadStream_Response{Msg: &pb.ReadStream_Response_File{File: &pb.FileRef{Token: token}}}); err != nil {
		fr.Close()
		return err
	}
	eof := false
	select {
	case eof = <-done:
	case <-out.Context().Done():
	}
	fr.Done(eof)
	end := &pb.ReadStream_End{}
	if err := fr.Close(); err != nil {
		end.Error = status.Convert(s.status(h, err)).Message()
	}
	return out.Send(&pb.ReadStream_Response{Msg: &pb.ReadStream_Response_End{End: end}})
}

// FinishFile says pipe stopped reading a file it was handed.
func (s *server) FinishFile(ctx context.Context, req *pb.FinishFile_Request) (*pb.FinishFile_Response, error) {
	s.mu.Lock()
	done, ok := s.reading[req.GetToken()]
	s.mu.Unlock()
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no file %d is being read", req.GetToken())
	}
	select {
	case done <- req.GetEof():
	default:
	}
	return &pb.FinishFile_Response{}, nil
}

// CreateObject starts an object that lives across calls; a file-backed one
// is handed over when pipe takes descriptors.
func (s *server) CreateObject(ctx context.Context, req *pb.CreateObject_Request) (*pb.CreateObject_Response, error) {
	h := req.GetHandle()
	snk, err := s.sink(h)
	if err != nil {
		return nil, err
	}
	octx, cancel := context.WithCancel(context.Background())
	o := req.GetObject()
	w, err := snk.Create(octx, wire.ObjectFromPB(o))
	if err != nil {
		cancel()
		return nil, s.status(h, err)
	}
	resp := &pb.CreateObject_Response{Token: s.tokens.Add(1)}
	if req.GetAcceptFd() && s.fds != nil {
		if fw, ok := w.(sdk.FileWriter); ok {
			resp.File = s.fds.Send(resp.Token, fw.File()) == nil
		} else if po, pw, err := pipeObject(w); err == nil {
			// No file: pipe writes the object through a pipe instead.
			resp.File = s.fds.Send(resp.Token, pw) == nil
			pw.Close() // pipe holds the write end now
			if resp.File {
				go po.pump()
				w = po
			} else {
				po.closeRead()
			}
		}
	}
	s.mu.Lock()
	s.objects[resp.Token] = &pendingObject{w: w, handle: h, cancel: cancel}
	s.mu.Unlock()
	return resp, nil
}

// takeObject removes a pending object from the table.
func (s *server) takeObject(token uint64) (*pendingObject, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	o, ok := s.objects[token]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no object %d is being written", token)
	}
	delete(s.objects, token)
	return o, nil
}

// FinishObject commits or aborts an object made by CreateObject.
func (s *server) FinishObject(ctx context.Context, req *pb.FinishObject_Request) (*pb.FinishObject_Response, error) {
	o, err := s.takeObject(req.GetToken())
	if err != nil {
		return nil, err
	}
	defer o.cancel()
	if !req.GetCommit() {
		// Given up: a Write stuck in the store (a hung upload) ends with
		// the object's context, and Abort waits for it.
		o.cancel()
	}
	return &pb.FinishObject_Response{}, s.status(o.handle, finish(ctx, o.w, req.GetCommit()))
}

// finish commits or aborts w; a failed Commit is followed by Abort, so an
// object the store kept although its answer was lost does not stay.
func finish(ctx context.Context, w sdk.ObjectWriter, commit bool) error {
	if !commit {
		return w.Abort(ctx)
	}
	err := w.Commit(ctx)
	if err != nil {
		w.Abort(context.WithoutCancel(ctx))
	}
	return err
}

// WriteObject writes one object: Open, data, then Finish. A call that ends
// without a Finish (the host went away, or cancelled) aborts the object.
func (s *server) WriteObject(in pb.Plugin_WriteObjectServer) error {
	s.writes.Add(1)
	defer s.writes.Done()
	ctx := in.Context()
	first, err := in.Recv()
	if err != nil {
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return status.Error(codes.InvalidArgument, "WriteObject must start with Open")
	}
	var w sdk.ObjectWriter
	h := open.GetHandle()
	if t := open.GetToken(); t != 0 {
		po, err := s.takeObject(t)
		if err != nil {
			return err
		}
		defer po.cancel()
		w, h = po.w, po.handle
		stop := context.AfterFunc(ctx, po.cancel) // the call ends: the object's context ends
		defer stop()
	} else {
		snk, err := s.sink(h)
		if err != nil {
			return err
		}
		if w, err = snk.Create(ctx, wire.ObjectFromPB(open.GetObject())); err != nil {
			return s.status(h, err)
		}
	}
	for {
		msg, err := in.Recv()
		if err != nil {
			w.Abort(context.WithoutCancel(ctx))
			if errors.Is(err, io.EOF) {
				return status.Error(codes.InvalidArgument, "WriteObject ended without Finish; the object was aborted")
			}
			return err
		}
		switch m := msg.GetMsg().(type) {
		case *pb.WriteObject_Request_Data:
			if _, err := w.Write(m.Data); err != nil {
				w.Abort(context.WithoutCancel(ctx))
				return s.status(h, err)
			}
		case *pb.WriteObject_Request_Finish:
			if err := finish(ctx, w, m.Finish.GetCommit()); err != nil {
				return s.status(h, err)
			}
			return in.SendAndClose(&pb.WriteObject_Response{})
		default:
			w.Abort(context.WithoutCancel(ctx))
			return status.Error(codes.InvalidArgument, "unexpected message in WriteObject")
		}
	}
}

func (s *server) ListObjects(ctx context.Context, req *pb.ListObjects_Request) (*pb.ListObjects_Response, error) {
	snk, err := s.sink(req.GetHandle())
	if err != nil {
		return nil, err
	}
	st, ok := snk.(sdk.Storage)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this sink cannot list its objects")
	}
	infos, err := st.List(ctx, req.GetPrefix())
	if err != nil {
		return nil, s.status(req.GetHandle(), err)
	}
	out := &pb.ListObjects_Response{}
	for _, o := range infos {
		out.Objects = append(out.Objects, &pb.ObjectInfo{Key: o.Key, Size: o.Size, ModifiedUnixNs: o.Modified.UnixNano()})
	}
	return out, nil
}

func (s *server) EstimateMemory(ctx context.Context, req *pb.EstimateMemory_Request) (*pb.EstimateMemory_Response, error) {
	if _, ok := s.schemas[key(req.GetKind(), req.GetType())]; !ok {
		return nil, status.Errorf(codes.NotFound, "plugin %s has no %s type %q", s.p.Name, kindName(req.GetKind()), req.GetType())
	}
	var t any = s.p.Sources[req.GetType()]
	if req.GetKind() == pb.Kind_KIND_SINK {
		t = s.p.Sinks[req.GetType()]
	}
	out := &pb.EstimateMemory_Response{}
	if m, ok := t.(sdk.MemoryEstimator); ok {
		out.Bytes = m.Memory(wire.ConfigFromPB(req.GetConfig()), int(req.GetStreams()))
	}
	return out, nil
}

func (s *server) Remove(ctx context.Context, req *pb.Remove_Request) (*pb.Remove_Response, error) {
	snk, err := s.sink(req.GetHandle())
	if err != nil {
		return nil, err
	}
	rm, ok := snk.(sdk.Remover)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this sink cannot remove objects")
	}
	return &pb.Remove_Response{}, s.status(req.GetHandle(), rm.Remove(ctx, req.GetKey()))
}

func (s *server) Flush(ctx context.Context, req *pb.Flush_Request) (*pb.Flush_Response, error) {
	snk, err := s.sink(req.GetHandle())
	if err != nil {
		return nil, err
	}
	f, ok := snk.(sdk.Flusher)
	if !ok {
		return &pb.Flush_Response{}, nil
	}
	return &pb.Flush_Response{}, s.status(req.GetHandle(), f.Flush(ctx))
}

func (s *server) ObjectLock(ctx context.Context, req *pb.ObjectLock_Request) (*pb.ObjectLock_Response, error) {
	snk, err := s.sink(req.GetHandle())
	if err != nil {
		return nil, err
	}
	l, ok := snk.(sdk.Locker)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this sink does not lock objects")
	}
	lock, err := l.ObjectLock(ctx, req.GetKey())
	if err != nil {
		return nil, s.status(req.GetHandle(), err)
	}
	out := &pb.ObjectLock_Response{Mode: lock.Mode, LegalHold: lock.LegalHold}
	if !lock.Until.IsZero() {
		out.RetainUntilUnixNs = lock.Until.UnixNano()
	}
	return out, nil
}

func (s *server) Conclude(ctx context.Context, req *pb.Conclude_Request) (*pb.Conclude_Response, error) {
	src, err := s.source(req.GetHandle())
	if err != nil {
		return nil, err
	}
	c, ok := src.(sdk.Concluder)
	if !ok {
		return &pb.Conclude_Response{}, nil
	}
	facts, err := c.Conclude(ctx)
	return &pb.Conclude_Response{Facts: facts}, s.status(req.GetHandle(), err)
}

func (s *server) Prepare(ctx context.Context, req *pb.Prepare_Request) (*pb.Prepare_Response, error) {
	snk, err := s.sink(req.GetHandle())
	if err != nil {
		return nil, err
	}
	p, ok := snk.(sdk.Preparer)
	if !ok {
		return &pb.Prepare_Response{}, nil
	}
	objs := make([]sdk.Object, 0, len(req.GetObjects()))
	for _, o := range req.GetObjects() {
		objs = append(objs, wire.ObjectFromPB(o))
	}
	resp := &pb.Prepare_Response{}
	if pp, ok := snk.(sdk.PartialPreparer); ok && len(req.GetFailed()) > 0 {
		wanted, err := pp.PreparePartial(ctx, objs, req.GetFailed())
		if err != nil {
			return nil, s.status(req.GetHandle(), err)
		}
		resp.Wanted = wanted
	} else if err := p.Prepare(ctx, objs); err != nil {
		return nil, s.status(req.GetHandle(), err)
	}
	if c, ok := snk.(sdk.Chooser); ok {
		resp.Declined = c.Declines(objs)
	}
	return resp, nil
}

func (s *server) Close(ctx context.Context, req *pb.Close_Request) (*pb.Close_Response, error) {
	s.mu.Lock()
	inst, ok := s.instances[req.GetHandle()]
	delete(s.instances, req.GetHandle())
	defer func() { s.mu.Lock(); delete(s.secrets, req.GetHandle()); s.mu.Unlock() }()
	s.mu.Unlock()
	if ok {
		if c, ok := inst.(io.Closer); ok {
			if err := c.Close(); err != nil {
				return nil, s.status(req.GetHandle(), err)
			}
		}
	}
	return &pb.Close_Response{}, nil
}

// Stop waits for objects being written to finish or abort (their temporary
// data is cleaned up), closes every instance; the host then ends the
// process.
func (s *server) Stop(ctx context.Context, _ *pb.Stop_Request) (*pb.Stop_Response, error) {
	done := make(chan struct{})
	go func() { s.writes.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.mu.Lock()
	insts := s.instances
	s.instances = map[uint64]any{}
	objs := s.objects
	s.objects = map[uint64]*pendingObject{}
	s.mu.Unlock()
	for _, o := range objs {
		o.w.Abort(context.Background())
		o.cancel()
	}
	for _, inst := range insts {
		if c, ok := inst.(io.Closer); ok {
			c.Close()
		}
	}
	return &pb.Stop_Response{}, nil
}
