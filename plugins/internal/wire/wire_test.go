package wire

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Errors cross the boundary with their message as the plugin wrote it and
// their kind: missing, cancelled, timed out.
func TestStatusRoundTrip(t *testing.T) {
	timeout := fmt.Errorf("uploading block 3 of https://acct/c/k: no byte moved for 1m0s: %w", context.DeadlineExceeded)
	for _, tc := range []struct {
		err  error
		kind error
	}{
		{timeout, context.DeadlineExceeded},
		{fmt.Errorf("stream %q: %w", "db", sdk.ErrNotFound), sdk.ErrNotFound},
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
