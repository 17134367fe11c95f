// Package tune is `pipe bench`'s tuner: it tries one pipeline of a file in
// several variants on this host (each profile, or each value of a swept
// setting such as workers=1,2,4), makes a trial run of each (the runner
// takes back what it wrote), measures its throughput, its stages'
// utilization, its bottleneck and its memory, and recommends one: the
// fastest or, among those within 5% of it, the one with the smallest memory
// budget, saying when the pick stores more than another variant.
//
// It is not bench/, the harness of `make bench` that compares pipe with cp,
// zstd, mc and rclone: that one measures pipe from outside, this one is
// part of pipe and measures a user's own pipeline.
//
// The CLI (cmd/pipe) owns the flags, loading and planning (with their
// diagnostics), the output streams and exit codes; tune owns what a
// variant is, how it is run and measured, and how one is chosen. It must
// not import the CLI or a concrete plugin: it runs pipelines through the
// runner, with the registry the CLI gives it.
package tune
