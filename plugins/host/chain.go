package host

import (
	"bytes"
	"context"
	"errors"
	"io"

	"github.com/pipebackup/pipe/plugins/internal/pb"
	"github.com/pipebackup/pipe/plugins/internal/wire"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// chainer is a remote source that builds on earlier runs (see
// sdk.Chainer): its Configure answer said so.
type chainer struct{ s *remoteSource }

// Follow sends the run the source may build on: the Start, then the
// parent's listing in pieces.
func (c chainer) Follow(ctx context.Context, parent *sdk.Parent, why string) error {
	s := c.s
	stream, err := s.proc.rpc.Follow(ctx)
	if err != nil {
		return s.proc.wrap(ctx, err)
	}
	start := &pb.Follow_Start{Handle: s.handle, Why: why}
	var listing []byte
	if parent != nil {
		start.HasParent, start.RunId, start.Facts = true, parent.RunID, parent.Facts
		start.FinishedUnixNs = parent.Finished.UnixNano()
		listing = parent.Listing
	}
	if err := stream.Send(&pb.Follow_Request{Msg: &pb.Follow_Request_Start{Start: start}}); err != nil {
		return s.proc.wrap(ctx, recvErr(stream, err))
	}
	for len(listing) > 0 {
		n := min(len(listing), wire.MaxData)
		if err := stream.Send(&pb.Follow_Request{Msg: &pb.Follow_Request_Listing{Listing: listing[:n]}}); err != nil {
			return s.proc.wrap(ctx, recvErr(stream, err))
		}
		listing = listing[n:]
	}
	_, err = stream.CloseAndRecv()
	return s.proc.wrap(ctx, err)
}

// recvErr is why a send on stream failed: the server's own error, which
// CloseAndRecv returns, when it ended the stream.
func recvErr(stream pb.Plugin_FollowClient, err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.CloseAndRecv(); rerr != nil {
			return rerr
		}
	}
	return err
}

// Listing asks the source what a later run needs of this one.
func (c chainer) Listing() []byte {
	s := c.s
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	stream, err := s.proc.rpc.Listing(ctx, &pb.Listing_Request{Handle: s.handle})
	if err != nil {
		return nil
	}
	var b bytes.Buffer
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			return b.Bytes()
		}
		if err != nil {
			return nil // the next run is a full, and says why
		}
		b.Write(msg.GetData())
	}
}

// composer is a remote sink that composes chains of runs (see
// sdk.Composer).
type composer struct{ s *remoteSink }

func (c composer) Compose(ctx context.Context, index, length int, runID string) error {
	s := c.s
	_, err := s.proc.rpc.Compose(ctx, &pb.Compose_Request{Handle: s.handle, Index: int32(index), Length: int32(length), RunId: runID})
	return s.proc.wrap(ctx, err)
}
