package runner

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Locked is a run (or an object) that retention would delete, but that
// its store still locks (S3 Object Lock): it waits, and a later prune
// deletes it once the lock ends.
type Locked struct {
	RunID     string    `json:"run_id,omitempty"`
	Key       string    `json:"key"`
	Mode      string    `json:"mode,omitempty"`
	Until     time.Time `json:"until,omitzero"`
	LegalHold bool      `json:"legal_hold,omitempty"`
}

// String says what waits and until when.
func (l Locked) String() string {
	what := l.Key
	if l.RunID != "" {
		what = "run " + l.RunID
	}
	if l.LegalHold {
		return what + " (under a legal hold, until it is lifted)"
	}
	return fmt.Sprintf("%s (%s until %s)", what, strings.ToLower(l.Mode), l.Until.UTC().Format(time.RFC3339))
}

// lockOf says how the object at key of store w is locked now; a store
// that does not lock answers none.
func lockOf(ctx context.Context, w catalog.Writer, key string) (sdk.Lock, error) {
	l, ok := w.(sdk.Locker)
	if !ok {
		return sdk.Lock{}, nil
	}
	return l.ObjectLock(ctx, key)
}

// heldBy returns the lock that keeps the object at key from deletion at
// now, or nil; nil too when the object is gone (another prune deleted it
// meanwhile).
func heldBy(ctx context.Context, w catalog.Writer, key, runID string, now time.Time) (*Locked, error) {
	l, err := lockOf(ctx, w, key)
	if errors.Is(err, sdk.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("asking whether %s is locked: %w", key, err)
	}
	if !l.Held(now) {
		return nil, nil
	}
	return &Locked{RunID: runID, Key: key, Mode: l.Mode, Until: l.Until, LegalHold: l.LegalHold}, nil
}

// ObjectLock says how the object at key under the store's root is locked
// (see sdk.Locker).
func (s sinkStore) ObjectLock(ctx context.Context, key string) (sdk.Lock, error) {
	if l, ok := s.st.(sdk.Locker); ok {
		return l.ObjectLock(ctx, s.root+key)
	}
	return sdk.Lock{}, nil
}

// ObjectLock says how the object at key of a sink's store is locked; a
// source's store answers none (it cannot delete).
func (s *Store) ObjectLock(ctx context.Context, key string) (sdk.Lock, error) {
	if l, ok := s.ep.sink.(sdk.Locker); ok {
		return l.ObjectLock(ctx, s.Root+key)
	}
	return sdk.Lock{}, nil
}

// HoldLocked moves the runs of rp.Drop that store w locks at now to
// rp.Locked (and the leftovers it locks out of rp.Garbage): retention
// deletes nothing locked, and says until when each waits.
func (rp *RetentionPlan) HoldLocked(ctx context.Context, w catalog.Writer, now time.Time) error {
	var drop []*catalog.Run
	for _, r := range rp.Drop {
		l, err := heldBy(ctx, w, r.Key, r.Manifest.RunID, now)
		if err != nil {
			return fmt.Errorf("run %s: %w; nothing was deleted", r.Manifest.RunID, err)
		}
		if l != nil {
			rp.Locked = append(rp.Locked, *l)
			rp.LockedRuns = append(rp.LockedRuns, r)
			continue
		}
		drop = append(drop, r)
	}
	rp.Drop = drop
	// What a locked run builds on stays with it: its lock outlasts theirs.
	rp.keepParents(rp.LockedRuns)
	var garbage []sdk.ObjectInfo
	for _, o := range rp.Garbage {
		l, err := heldBy(ctx, w, o.Key, "", now)
		if err != nil {
			return fmt.Errorf("leftover %s: %w; nothing was deleted", o.Key, err)
		}
		if l != nil {
			rp.Locked = append(rp.Locked, *l)
			continue
		}
		garbage = append(garbage, o)
	}
	rp.Garbage = garbage
	return nil
}

// Standing are the runs that stay after the plan is applied: those it
// keeps and those their lock keeps.
func (rp *RetentionPlan) Standing() []*catalog.Run {
	return append(slices.Clip(rp.Keep), rp.LockedRuns...)
}
