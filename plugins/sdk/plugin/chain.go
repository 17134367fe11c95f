package plugin

import (
	"bytes"
	"context"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pipebackup/pipe/plugins/internal/pb"
	"github.com/pipebackup/pipe/plugins/internal/wire"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// maxListing bounds a listing a Follow receives (a cluster of millions of
// files lists in less).
const maxListing = 1 << 30

// Follow hands a chainer source the run it may build on: the Start, then
// the listing's pieces.
func (s *server) Follow(in pb.Plugin_FollowServer) error {
	first, err := in.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return status.Error(codes.InvalidArgument, "Follow must start with Start")
	}
	src, err := s.source(start.GetHandle())
	if err != nil {
		return err
	}
	c, ok := src.(sdk.Chainer)
	if !ok {
		return status.Errorf(codes.FailedPrecondition, "instance %d does not build on earlier runs", start.GetHandle())
	}
	var listing bytes.Buffer
	for {
		msg, err := in.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if listing.Len()+len(msg.GetListing()) > maxListing {
			return status.Error(codes.ResourceExhausted, "the parent's listing is larger than a plugin takes")
		}
		listing.Write(msg.GetListing())
	}
	var parent *sdk.Parent
	if start.GetHasParent() {
		parent = &sdk.Parent{RunID: start.GetRunId(), Finished: time.Unix(0, start.GetFinishedUnixNs()).UTC(), Facts: start.GetFacts(), Listing: listing.Bytes()}
	}
	err = c.Follow(in.Context(), parent, start.GetWhy())
	if err != nil {
		return s.status(start.GetHandle(), err)
	}
	return in.SendAndClose(&pb.Follow_Response{})
}

// Listing sends a chainer source's listing in pieces.
func (s *server) Listing(req *pb.Listing_Request, out pb.Plugin_ListingServer) error {
	src, err := s.source(req.GetHandle())
	if err != nil {
		return err
	}
	c, ok := src.(sdk.Chainer)
	if !ok {
		return nil
	}
	b := c.Listing()
	for len(b) > 0 {
		n := min(len(b), wire.MaxData)
		if err := out.Send(&pb.Listing_Response{Data: b[:n]}); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// Compose tells a composer sink which run of a chain comes next.
func (s *server) Compose(ctx context.Context, req *pb.Compose_Request) (*pb.Compose_Response, error) {
	snk, err := s.sink(req.GetHandle())
	if err != nil {
		return nil, err
	}
	c, ok := snk.(sdk.Composer)
	if !ok {
		return nil, status.Errorf(codes.FailedPrecondition, "instance %d does not compose runs", req.GetHandle())
	}
	return &pb.Compose_Response{}, s.status(req.GetHandle(), c.Compose(ctx, int(req.GetIndex()), int(req.GetLength()), req.GetRunId()))
}
