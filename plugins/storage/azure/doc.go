// Package azure is the "azure" endpoint: Azure Blob Storage (and Azurite)
// as a sink that writes each stream as one block blob, and as a source that
// reads blobs back for a restore.
//
// The sink stages blocks of block_size, up to concurrency of them in flight
// per object over a pooled, tuned HTTP transport, each block retried by
// azcore's retry policy and sent with its MD5, which the service checks. A
// blob exists only once Commit commits its block list (objects below
// max_single_put_size are sent in one Put Blob at Commit); Abort, a failed
// block or a cancelled context commits nothing. The sink is also an
// sdk.Storage (List, Open, Remove), so pipe reads manifests back from it
// and applies retention.
//
// The source lists the blobs under prefix (or reads one blob, key) and reads
// each with parallel ranged GETs pinned to the blob's ETag, reassembled in
// order through a fixed set of block_size buffers.
//
// Errors name the operation, the container and the blob, and say what to do;
// they never contain credentials (account keys, SAS tokens, connection
// strings), not even inside URLs.
//
// It imports the plugin SDK and Azure's SDK only, never the engine or
// another plugin. It must not buffer more than its MemoryEstimator reports,
// and it must not leave a committed blob behind for an object that was not
// committed.
package azure
