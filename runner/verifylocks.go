package runner

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// LockReport is what pipe verify --locks found: whether every object of
// each run checked (its manifest included) is locked by the store, and
// until when.
type LockReport struct {
	Store string     `json:"store"`
	Runs  []RunLocks `json:"runs"`
	Bad   int        `json:"bad"`
}

// OK reports whether every object of every run checked is locked long
// enough.
func (r *LockReport) OK() bool { return r.Bad == 0 && len(r.Runs) > 0 }

// RunLocks is one run's locks.
type RunLocks struct {
	RunID   string `json:"run_id"`
	Objects int    `json:"objects"`
	// Mode is the lock of the run's objects ("COMPLIANCE", "GOVERNANCE";
	// "mixed" when they differ, "" when none is locked).
	Mode string `json:"mode,omitempty"`
	// Until is when the first of its objects' locks ends.
	Until time.Time `json:"until,omitzero"`
	// Need is when the run's retention (keep_within) lets it go: a lock
	// that ends before leaves it unprotected while it is meant to be kept.
	Need time.Time `json:"need,omitzero"`
	// Problems name each object that is not locked, or not long enough.
	Problems []string `json:"problems,omitempty"`
}

// VerifyLocks asks the store how each object of the runs o chooses is
// locked: every one must be locked now and, where the sink's keep_within
// says how long a run is kept, at least that long after the run finished.
// It reads no object's bytes but, with o.Trust, each run's manifest, whose
// signature must be trusted too: one request per object.
func VerifyLocks(ctx context.Context, s *Store, o VerifyOptions) (*LockReport, error) {
	rep := &LockReport{Store: s.Where()}
	if _, ok := s.ep.sink.(sdk.Locker); !ok {
		return rep, fmt.Errorf("%s cannot say how its objects are locked: --locks needs the sink of a pipeline writing to a store that locks objects (s3 with object_lock_days)", s.Where())
	}
	runs, _, err := chooseRuns(ctx, s, o)
	if err != nil {
		return rep, err
	}
	now := time.Now()
	for _, r := range runs {
		rl := RunLocks{RunID: r.Manifest.RunID}
		if s.Def != nil && s.Def.Retention.Within > 0 {
			rl.Need = r.Manifest.FinishedAt.Add(s.Def.Retention.Within)
		}
		if o.Trust != nil {
			// A run nobody trusted signed is not protected by its locks:
			// they keep a forgery.
			if _, _, _, err := trustedRun(ctx, s, r, o.Trust, o.Who); err != nil {
				rl.Problems = append(rl.Problems, err.Error())
			}
		}
		for _, key := range append([]string{r.Key}, r.Keys()...) {
			rl.Objects++
			l, err := s.ObjectLock(ctx, key)
			switch {
			case err != nil:
				rl.Problems = append(rl.Problems, fmt.Sprintf("%s: %v", key, err))
				continue
			case !l.Held(now):
				rl.Problems = append(rl.Problems, fmt.Sprintf("%s is not locked", key))
				continue
			case l.LegalHold && l.Mode == "":
				continue // held until lifted
			case !rl.Need.IsZero() && l.Until.Before(rl.Need):
				rl.Problems = append(rl.Problems, fmt.Sprintf("%s is locked only until %s, before keep_within lets the run go (%s)", key, l.Until.UTC().Format(time.RFC3339), rl.Need.UTC().Format(time.RFC3339)))
			}
			switch {
			case rl.Mode == "":
				rl.Mode = l.Mode
			case rl.Mode != l.Mode:
				rl.Mode = "mixed"
			}
			if rl.Until.IsZero() || l.Until.Before(rl.Until) {
				rl.Until = l.Until
			}
		}
		if len(rl.Problems) > 0 {
			rep.Bad++
		}
		rep.Runs = append(rep.Runs, rl)
	}
	return rep, nil
}

// String says in one line how the run is locked.
func (r RunLocks) String() string {
	if len(r.Problems) > 0 {
		more := ""
		if len(r.Problems) > 3 {
			more = fmt.Sprintf("; and %d more", len(r.Problems)-3)
		}
		return fmt.Sprintf("run %s: NOT PROTECTED: %s%s", r.RunID, strings.Join(r.Problems[:min(3, len(r.Problems))], "; "), more)
	}
	return fmt.Sprintf("run %s: %d objects locked (%s) until at least %s", r.RunID, r.Objects, strings.ToLower(r.Mode), r.Until.UTC().Format(time.RFC3339))
}
