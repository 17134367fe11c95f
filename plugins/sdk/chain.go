package sdk

import (
	"context"
	"time"
)

// The facts of a run that builds on another (see Chainer): what the
// catalog, verify, retention and a restore read to treat a chain as one.
const (
	// FactParent is the run id of the run this one builds on: restoring
	// it needs that run, and every run that one needs, back to a full.
	FactParent = "parent_run"
	// FactBackupType is "full" or "incremental".
	FactBackupType = "backup_type"
	// FactFullReason says why a source asked for incrementals took a
	// full run instead (no parent, a timeline switch, the policy).
	FactFullReason = "full_reason"
)

// Parent is the run the host offers a Chainer to build on: the newest
// complete run of the pipeline in its first store, whose every ancestor
// is there too.
type Parent struct {
	RunID    string
	Finished time.Time
	// Facts are the facts its manifest records.
	Facts map[string]string
	// Listing is what the source's Listing returned for it.
	Listing []byte
}

// Chainer is implemented by sources that can read only what changed
// since an earlier run of their pipeline: an incremental base backup of
// PostgreSQL 17. Before Streams, the host calls Follow with the run it
// may build on, or with nil and why there is none (the first run, a
// parent whose chain lost a run). The source decides, and records the
// decision as facts: FactParent when it builds on parent, FactBackupType,
// and FactFullReason when it could not.
type Chainer interface {
	Follow(ctx context.Context, parent *Parent, why string) error
	// Listing returns, after Conclude, what a later run needs of this one
	// (a server's file names and sizes, never contents): the host keeps
	// it in the run's manifest and hands it back as Parent.Listing.
	Listing() []byte
}

// Composer is implemented by sinks that restore a chain of runs (see
// Chainer) into one result. The host restores the runs one after the
// other, newest first: before each, it calls Compose with the run's
// place in the chain (0 for the run asked for) and the chain's length,
// then Prepare, the objects and Flush as for a run alone. The sink
// finishes the result only at the Flush of the last (the full run). A
// Composer must be a Flusher and a Remover too: when a run of the chain
// fails, the host removes what the newest run committed.
type Composer interface {
	Compose(ctx context.Context, index, length int, runID string) error
}
