package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	writes    sync.WaitGroup // WriteObject calls in progress
}

// NewServer returns the protocol server of p, for tests that run it
// without a process.
func NewServer(p sdk.Plugin) (pb.PluginServer, error) { return newServer(p) }

func newServer(p sdk.Plugin) (*server, error) {
	s := &server{p: p, schemas: map[string]*pb.Endpoint{}, instances: map[uint64]any{}}
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
	out := &pb.GetSchema_Response{Name: s.p.Name, Version: s.p.Version}
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
	resp := &pb.Configure_Response{Diagnostics: wire.DiagsToPB(diags)}
	if diags.HasErrors() || inst == nil {
		if !diags.HasErrors() {
			resp.Diagnostics = append(resp.Diagnostics, &pb.Diagnostic{Summary: fmt.Sprintf("%s %q returned no instance", kindName(ep.Kind), ep.Type)})
		}
		return resp, nil
	}
	_, resp.Remover = inst.(sdk.Remover)
	_, resp.Flusher = inst.(sdk.Flusher)
	s.mu.Lock()
	s.next++
	resp.Handle = s.next
	s.instances[s.next] = inst
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
		return nil, wire.ToStatus(err)
	}
	out := &pb.ListStreams_Response{}
	for _, in := range infos {
		out.Streams = append(out.Streams, &pb.StreamInfo{Name: in.Name, Size: in.Size})
	}
	return out, nil
}

// ReadStream sends the stream in messages of up to wire.MaxData bytes. The
// host cancelling the call cancels the context the source was opened with.
func (s *server) ReadStream(req *pb.ReadStream_Request, out pb.Plugin_ReadStreamServer) error {
	src, err := s.source(req.GetHandle())
	if err != nil {
		return err
	}
	ctx := out.Context()
	rc, err := src.Open(ctx, req.GetName())
	if err != nil {
		return wire.ToStatus(err)
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
			return wire.ToStatus(rerr)
		}
	}
	end := &pb.ReadStream_End{}
	if err := rc.Close(); err != nil {
		end.Error = err.Error()
	}
	return out.Send(&pb.ReadStream_Response{Msg: &pb.ReadStream_Response_End{End: end}})
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
	snk, err := s.sink(open.GetHandle())
	if err != nil {
		return err
	}
	o := open.GetObject()
	w, err := snk.Create(ctx, sdk.Object{Key: o.GetKey(), Stream: o.GetStream(), Size: o.GetSize()})
	if err != nil {
		return wire.ToStatus(err)
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
				return wire.ToStatus(err)
			}
		case *pb.WriteObject_Request_Finish:
			if !m.Finish.GetCommit() {
				return wire.ToStatus(w.Abort(ctx))
			}
			if err := w.Commit(ctx); err != nil {
				return wire.ToStatus(err)
			}
			return in.SendAndClose(&pb.WriteObject_Response{})
		default:
			w.Abort(context.WithoutCancel(ctx))
			return status.Error(codes.InvalidArgument, "unexpected message in WriteObject")
		}
	}
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
	return &pb.Remove_Response{}, wire.ToStatus(rm.Remove(ctx, req.GetKey()))
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
	return &pb.Flush_Response{}, wire.ToStatus(f.Flush(ctx))
}

func (s *server) Close(ctx context.Context, req *pb.Close_Request) (*pb.Close_Response, error) {
	s.mu.Lock()
	inst, ok := s.instances[req.GetHandle()]
	delete(s.instances, req.GetHandle())
	s.mu.Unlock()
	if ok {
		if c, ok := inst.(io.Closer); ok {
			if err := c.Close(); err != nil {
				return nil, wire.ToStatus(err)
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
	s.mu.Unlock()
	for _, inst := range insts {
		if c, ok := inst.(io.Closer); ok {
			c.Close()
		}
	}
	return &pb.Stop_Response{}, nil
}
