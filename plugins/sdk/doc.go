// Package sdk is what a pipe endpoint is written against: the Source and Sink
// interfaces (plain Go, built on io.Reader and io.Writer, a context on every
// call), the config schema an endpoint declares, and the diagnostics it returns.
//
// The engine talks to every endpoint through these interfaces only, whether
// the endpoint runs in-process or behind the plugin protocol. This package
// must not import the engine or any other part of pipe: a plugin binary links
// this package and nothing else of pipe's.
package sdk
