// Package catalog reads a store as runs: each run is a manifest and the
// objects it names (the manifest is the truth), and objects that no
// manifest names are leftovers of runs that did not finish. Restores pick
// a run from it, retention and `pipe backups` list it.
//
// It reads through a small Store interface (list and open) that a storage
// source or a storage sink provides, and never writes. It must not import
// the engine, a stage or a plugin.
package catalog
