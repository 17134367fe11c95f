// Package pipefile loads pipeline files (HCL): variables, functions and
// pipeline blocks with their source, stages and sinks. Each endpoint block
// is decoded against the config schema its endpoint declares, so a typo or a
// wrong type is a diagnostic at file:line:column before any byte moves, and
// one load reports every error of a file.
//
// It turns text into typed values; it does not resolve profiles, start
// endpoints or move data. It must not import the engine or a plugin.
package pipefile
