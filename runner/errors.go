package runner

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plan"
)

// MissingError is the error of a restore of a partial run that asked for
// streams the backup failed to store (a cluster's databases): the others
// were restored.
type MissingError struct {
	Pipeline, RunID string
	Missing         []manifest.Failed
	Restored        int
}

func (e *MissingError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline %q: %s asked for not in run %s, which failed in the backup (the other %s restored; pipe backups show names what the run holds):",
		e.Pipeline, plan.Plural(len(e.Missing), "stream"), e.RunID, plan.Plural(e.Restored, "stream"))
	for _, f := range e.Missing {
		fmt.Fprintf(&b, "\n  %s: %s", f.Stream, f.Error)
	}
	return b.String()
}

// missingError is the MissingError of a restore of run runID that
// restored restored streams and asked for the streams missing of those
// that failed in the backup.
func missingError(pipeline, runID string, restored int, missing []string, failedInBackup []manifest.Failed) *MissingError {
	me := &MissingError{Pipeline: pipeline, RunID: runID, Restored: restored}
	asked := map[string]bool{}
	for _, m := range missing {
		asked[m] = true
	}
	for _, f := range failedInBackup {
		if asked[f.Stream] {
			me.Missing = append(me.Missing, f)
		}
	}
	return me
}

// DamagedError is the error of a run that was stored whole although its
// source found what it read damaged (see sdk.FactDamage).
type DamagedError struct {
	Pipeline, RunID, Damage string
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("pipeline %q: stored as run %s, but the source found what it read damaged: %s; the run is kept and flagged (pipe backups shows it, pipe verify fails on it): repair the damage on the server, and keep an older run that holds the damaged parts intact", e.Pipeline, e.RunID, e.Damage)
}

// PartialError is the error of a run whose streams stand alone when some
// of them failed: the others were stored, under a manifest that names
// the failed ones.
type PartialError struct {
	Pipeline string
	Failed   []manifest.Failed
	Stored   int
}

func (e *PartialError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pipeline %q: %d of %d streams failed (the other %d were stored):", e.Pipeline, len(e.Failed), len(e.Failed)+e.Stored, e.Stored)
	for _, f := range e.Failed {
		fmt.Fprintf(&b, "\n  %s: %s", f.Stream, f.Error)
	}
	return b.String()
}

// DiagError carries diagnostics from configuring endpoints, with file
// positions.
type DiagError struct{ Diags hcl.Diagnostics }

func (e *DiagError) Error() string { return e.Diags.Error() }
