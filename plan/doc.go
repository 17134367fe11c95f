// Package plan resolves a loaded pipeline into concrete numbers: the
// profile's presets overridden by the file's explicit settings and by the
// --profile flag, each stage built with its codec, level, workers and keys,
// and the run's buffer layout and memory budget. It reports semantic
// mistakes (an unknown codec, a level out of range, stages in the wrong
// order, an unreadable key) as diagnostics at file:line:column, and prints
// plans for people and for programs.
//
// It starts no endpoint and moves no data; it must not import a plugin.
package plan
