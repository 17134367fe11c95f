// Package engine moves streams from a source through in-process stages to
// one or more sinks with bounded memory.
//
// Data travels in chunks: fixed-capacity buffers taken from per-position
// pools whose sizes the Layout fixes before a run starts, so the memory a run
// uses is known up front and does not grow with its input. When every buffer
// of a position is in flight the producer blocks: that is the backpressure.
// Several streams run at once, and a Mapper stage runs several workers on
// the chunks of one stream, shared by all streams of the run; a reorder step
// restores the order of a stream's chunks before anything order-sensitive.
// The first error cancels everything; an object is committed only when its
// stream ended cleanly, and a failed run takes back what it committed.
//
// The engine knows stages only through the Mapper, Streamer and Observer
// interfaces and endpoints only through the plugin SDK's Source and Sink. It
// must not import the CLI, a concrete stage or a concrete plugin.
package engine
