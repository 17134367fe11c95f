package runner

import (
	"errors"
	"strings"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/manifest"
)

// Report describes a finished (or failed) run.
type Report struct {
	Pipeline string `json:"pipeline"`
	RunID    string `json:"run_id"`
	// Restore is true when the pipeline decodes, or reads a backup through
	// its manifest: it writes no manifest of its own.
	Restore bool `json:"restore"`
	// ManifestRead is the manifest a restore followed, if any; SignedBy
	// the trusted key that signed it, when the pipeline trusts keys.
	ManifestRead string `json:"manifest_read,omitempty"`
	SignedBy     string `json:"manifest_signed_by,omitempty"`
	// Manifests are the manifests written, one per storage sink.
	Manifests []string `json:"manifests_written,omitempty"`
	Streams   int      `json:"streams"`
	// Skipped names the streams of the run read no further because every
	// sink declined them (a cluster restore of some databases).
	Skipped []string `json:"skipped_streams,omitempty"`
	// Incomplete names the streams a restore left out because a stream
	// of their group failed in the backup (see sdk.Independent): a
	// database read table by table whose backup lacks a table.
	Incomplete []string       `json:"incomplete_streams,omitempty"`
	Result     *engine.Result `json:"-"`
	Budget     int64          `json:"memory_budget_bytes"`
	// Retention says what retention deleted, per sink.
	Retention []RetentionReport `json:"retention,omitempty"`
	// WALRetention says what retention removed from the WAL archive.
	WALRetention *WALPrune `json:"wal_retention,omitempty"`
	// Failed are the streams that failed in a run whose streams stand
	// alone (a cluster's databases): the others were stored.
	Failed []manifest.Failed `json:"failed_streams,omitempty"`
	// FailedInBackup are, for a restore of a partial run (see
	// sdk.Independent), the streams that failed in the backup: no object
	// holds them, and the restore names each.
	FailedInBackup []manifest.Failed `json:"failed_in_backup,omitempty"`
	// Missing names those of them the restore asked for (a sink that does
	// not choose asks for all): the run fails once the rest is restored.
	Missing []string `json:"missing_streams,omitempty"`
	// Damage is what the source found damaged in what it read (see
	// sdk.FactDamage): the run was stored, flagged, and fails.
	Damage string `json:"damage,omitempty"`
	// Chain, for a restore of a run that builds on others, are the runs
	// it composed, newest first (the run asked for, then its parents to
	// the full).
	Chain []string `json:"chain,omitempty"`
}

// failedStreams are the streams of an isolated run that failed, by
// their names (a restore's, as its manifest has them), each with its
// error on one line, scrubbed of secrets and bounded for the manifest.
func failedStreams(res *engine.Result, sp *streamsPlan, scrub func(string) string) []manifest.Failed {
	var out []manifest.Failed
	for i, r := range res.Streams {
		if r.Committed || r.Err == nil {
			continue
		}
		name := r.Name
		if i < len(sp.streams) {
			name = sp.streams[i].name
		}
		msg := r.Err.Error()
		if scrub != nil {
			msg = scrub(msg)
		}
		out = append(out, manifest.Failed{Stream: name, Error: oneLine(msg)})
	}
	return out
}

// oneLine makes a message fit a manifest: one line, no control
// characters, at most manifest.MaxErrorLen bytes.
func oneLine(msg string) string {
	msg = strings.Map(func(c rune) rune {
		if c < 0x20 || c == 0x7f {
			return ' '
		}
		return c
	}, strings.Join(strings.Fields(msg), " "))
	if len(msg) > manifest.MaxErrorLen {
		msg = strings.ToValidUTF8(msg[:manifest.MaxErrorLen-3], "") + "..."
	}
	return msg
}

// streamsError is the error of a run the engine finished whose streams
// did not all come through, nil when they did: some failed in a run
// whose streams stand alone (the others were stored), the source found
// what it read damaged (stored and flagged), a restore asked for streams
// that failed in the backup. Retention follows none of them.
func (r *run) streamsError(res *engine.Result) error {
	var errs []error
	if len(r.rep.Failed) > 0 {
		errs = append(errs, &PartialError{Pipeline: r.p.Name, Failed: r.rep.Failed, Stored: len(res.Streams) - len(r.rep.Failed)})
	}
	if r.rep.Damage != "" {
		errs = append(errs, &DamagedError{Pipeline: r.p.Name, RunID: r.o.RunID, Damage: r.rep.Damage})
	}
	if len(r.rep.Missing) > 0 {
		errs = append(errs, missingError(r.p.Name, r.sp.from.Manifest.RunID, len(res.Streams)-len(r.rep.Failed), r.rep.Missing, r.rep.FailedInBackup))
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
