// Package runner executes one resolved pipeline, and does the work of the
// commands that act on the runs a store holds.
//
// Run configures the endpoints (their errors point at the file), lists the
// source's streams, reads the newest manifest when the source holds runs,
// and then decides what kind of run it is: a backup, a copy of a stored
// run into stores that keep runs, a restore, or pipe bench's trial (kind
// and decide, in run.go, are the one place that says). Each kind takes its
// own short path: it names every object, runs the engine and, for a run
// that stores, writes the manifest last, once every stream committed, and
// then applies retention. A new kind of run gets a path of its own, not
// branches in the others.
//
// The files follow a run: run.go (Run, the kinds and their paths),
// endpoints.go, streams.go (what a run reads), objects.go (object names,
// manifests), runkey.go, retention.go and walretention.go, trial.go,
// errors.go and report.go. store.go, backups.go, verify.go and archive.go
// serve the catalog and WAL commands.
//
// It knows endpoints through the SDK and the host registry only; it must
// not import a concrete plugin or the CLI.
package runner
