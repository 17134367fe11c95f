// Package spool is what PostgreSQL's archive_command and restore_command
// share, on the server's disk, with pipe's background pusher and
// prefetcher: the push spool's notes of files pushed ahead and its locks,
// the prefetch spool's segments and marks, whether a process may outlive
// the command PostgreSQL runs (the background attribute) and how one is
// started. Command answers a push the spool noted and a fetch of a
// spooled segment without a store.
//
// It links no store, codec or hash, and must stay so: pipe-wal, which
// PostgreSQL starts once per segment, is this package and a reader of
// the archive's settings, and every package it links adds to the start of
// each command (package initialisers, pages of a larger binary). Package
// wal, which pushes and fetches, builds on it.
package spool
