// Package ranged reads one object of an object store for a restore as
// parallel ranged requests, handed to the caller in order. It is the
// reading half the s3, gcs and azure endpoints share.
//
// Open splits the object into parts of PartSize bytes and keeps up to
// Concurrency of them in flight: the one being read and those after it.
// Each part has a buffer of its own, taken back for the next part once the
// caller has read it, so an open object never holds more than Concurrency
// × PartSize bytes, and a caller that stops reading stops the requests too
// (backpressure). A part whose body breaks off is asked again for its
// missing bytes only, at once when the attempt moved some, after a growing
// pause when it did not, and the read fails after Retries attempts in a
// row without progress. Close, a failed part or a cancelled context stops
// every request in flight and waits for them.
//
// What differs between stores stays with each endpoint and is passed in:
// the request for a range (Fetch), which also pins every range to the
// version of the object read first (an ETag's If-Match, a generation);
// the opening request that finds the object's size and version (First);
// which failed requests are worth repeating (Retryable); and how errors
// are worded (Explain), which names the object. Checks of the whole object
// (a CRC32C, say) wrap the reader Open returns.
//
// It must not import the engine, the runner or another plugin: built-in
// storage plugins import it, and it imports the standard library and, of
// pipe, only plugins/sdk/hugepage (the parts' buffers), as
// internal/layering checks.
package ranged
