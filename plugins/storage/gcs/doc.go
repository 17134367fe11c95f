// Package gcs is the "gcs" endpoint: Google Cloud Storage (and emulators
// such as fake-gcs-server) as a sink that writes each stream as one object
// with a resumable upload, and as a source that restores objects with
// parallel ranged reads reassembled in order.
//
// The sink makes an object visible only when its stream ended and every
// byte was accepted: the upload is finalized at Commit, never before, and
// an aborted or cancelled upload is abandoned, so no object appears. The
// stored object's size and CRC32C are compared with what was sent, and an
// object that does not match is deleted. The sink also lists, reads back
// and removes objects (sdk.Storage), so manifests can be read and retention
// can delete old runs. The source reads up to concurrency ranges of
// part_size bytes of one object at once, retries a range that fails, and
// hands the bytes on in order, with memory bounded by concurrency ×
// part_size per stream.
//
// Credentials come from credentials_file or credentials_json, else from
// Application Default Credentials; an emulator (endpoint over plain http,
// or STORAGE_EMULATOR_HOST) is used anonymously. Credentials never appear
// in errors: every error this package returns names the operation, the
// object (gs://bucket/key) and what to do, with the credentials' values
// removed.
//
// It imports the plugin SDK and third-party libraries only, never the
// engine or another plugin, and it must not buffer more than its memory
// estimate says (sdk.MemoryEstimator).
package gcs
