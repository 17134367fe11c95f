package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// PinRun pins the run id of the store: no retention deletes it (keep_last
// and the calendar rules do not count it either way), and pipe backups
// delete asks for --force. The pin is an object beside the run's manifest
// (catalog.PinKey), which stays as written.
func PinRun(ctx context.Context, s *Store, id, reason string, now time.Time) (*catalog.Run, error) {
	r, err := storeRun(ctx, s, id)
	if err != nil {
		return nil, err
	}
	b, _ := json.Marshal(catalog.Pin{PinnedAt: now.UTC(), Reason: reason})
	if err := s.Put(ctx, catalog.PinKey(r.Key), append(b, '\n')); err != nil {
		return nil, fmt.Errorf("pinning run %s: %w", id, err)
	}
	r.Pinned = true
	return r, nil
}

// UnpinRun removes the run's pin; a run without one is not an error.
func UnpinRun(ctx context.Context, s *Store, id string) (*catalog.Run, error) {
	r, err := storeRun(ctx, s, id)
	if err != nil {
		return nil, err
	}
	if err := s.Remove(ctx, catalog.PinKey(r.Key)); err != nil && !errors.Is(err, sdk.ErrNotFound) {
		return nil, fmt.Errorf("unpinning run %s: %w", id, err)
	}
	r.Pinned = false
	return r, nil
}

// storeRun reads the store's catalog for the complete run id, in a store
// pipe may write.
func storeRun(ctx context.Context, s *Store, id string) (*catalog.Run, error) {
	if !s.Writable() {
		return nil, fmt.Errorf("pipeline %q reads %s as a source: pin and unpin need the pipeline whose sink keeps the runs", s.Pipeline, s.Where())
	}
	cat, err := catalog.Read(ctx, s)
	if err != nil {
		return nil, err
	}
	r := cat.Run(id)
	if r == nil {
		return nil, fmt.Errorf("%s holds no complete run %s (pipe backups lists its runs)", s.Where(), id)
	}
	return r, nil
}
