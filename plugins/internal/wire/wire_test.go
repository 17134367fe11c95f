package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Errors cross the boundary with their message as the plugin wrote it and
// their kind: missing, existing, cancelled, timed out.
func TestStatusRoundTrip(t *testing.T) {
	timeout := fmt.Errorf("uploading block 3 of https://acct/c/k: no byte moved for 1m0s: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		err  error
		kind error
	}{
		{timeout, context.DeadlineExceeded},
		{fmt.Errorf("stream %q: %w", "db", sdk.ErrNotFound), sdk.ErrNotFound},
		{fmt.Errorf("committing %s: %w", "a/b.claim", sdk.ErrExists), sdk.ErrExists},
		{fmt.Errorf("listing: %w", context.Canceled), context.Canceled},
		{errors.New("disk full"), nil},
	} {
		got := FromStatus(context.Background(), ToStatus(tc.err))
		if got.Error() != tc.err.Error() {
			t.Errorf("message %q, want %q", got, tc.err)
		}
		if tc.kind != nil && !errors.Is(got, tc.kind) {
			t.Errorf("%q does not match %v", got, tc.kind)
		}
	}
	// A cancellation the host asked for reads as the host's own cause.
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("interrupted"))
	if got := FromStatus(ctx, ToStatus(context.Canceled)); got.Error() != "interrupted" {
		t.Errorf("cancelled by the host: %q", got)
	}
}

// A sink's exclusive create crosses the boundary both ways: the schema
// that declares it and each object that asks for it.
func TestExclusiveRoundTrip(t *testing.T) {
	s, err := SchemaToPB(sdk.Schema{Storage: true, ExclusiveCreate: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := SchemaFromPB(s); !got.Storage || !got.ExclusiveCreate {
		t.Errorf("schema after the wire: %+v", got)
	}
	o := sdk.Object{Key: "a/b.claim", Stream: "b", Size: 3, MaxSize: 3, Exclusive: true}
	if got := ObjectFromPB(ObjectToPB(o)); got != o {
		t.Errorf("object after the wire: %+v, want %+v", got, o)
	}
}
