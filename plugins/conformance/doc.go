// Package conformance is the test suite every source and sink plugin must
// pass, built-in or third-party, in-process and through the plugin
// protocol: empty streams, one byte, many chunks, many streams at once, a
// missing stream, an abort mid-stream that leaves nothing committed, a slow
// sink that holds the writer back instead of buffering, cancellation that
// reaches the endpoint, and secrets that never appear in errors.
//
// A plugin's tests describe how to make its endpoints and how to look at
// what they did (Source, Sink), then call RunSource and RunSink. Serve and
// Remote run the same endpoints behind the protocol in a child process:
// the test binary itself, serving them when asked.
package conformance
