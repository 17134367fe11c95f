// Package wal archives PostgreSQL's write-ahead log: it is what pipe wal
// push (archive_command) and pipe wal fetch (restore_command) run, and what
// pipe wal list and verify read.
//
// Each file PostgreSQL archives (a segment, a timeline history, a backup
// label, a partial segment) becomes one object, compressed and encrypted in
// memory, laid out by the cluster's system identifier and timeline:
//
//	<root><system id>/<timeline>/<name>-<xxh3 of the file>-<sha256 of the object><ext>
//
// The file's digest in the name makes a push idempotent (the same content
// again is a notice) and refuses to overwrite (other content under an
// archived name is an error); the object's digest lets pipe wal verify
// check every object without a key; a fetch checks both. Before the object,
// a push creates the name's claim (<name>.claim, holding the file's
// digest) with the store's create-only-if-absent, so that of two pushes of
// different content exactly one archives its file. Objects are committed
// whole (a store's commit), so a killed push leaves nothing under a final
// name, and PostgreSQL retries. A fetch tells the end of the archive (exit
// 1) from a gap before later WAL and from a store that is not there
// (ErrHole, a failure: recovery stops).
//
// An archive with a signing key (sign { key }) signs each object's name:
//
//	<name>-<xxh3 of the file>-<sha256 of the object><signature><ext>
//
// the signature (ed25519, 86 characters of base64url) covering the
// object's key from the system id on, without it (see package signing). The name holds
// the stored bytes' SHA-256, which a fetch checks, so a trusted signature
// authenticates the content with no request more. An archive that trusts
// keys (trust { keys }) fetches only objects one of them signed, and an
// object none signed is a failure, never a file not archived; list and
// verify report such objects.
//
// It knows stores through the plugin SDK's Sink and Storage interfaces; it
// must not import the engine's runner or a concrete plugin.
package wal
