// Package s3 is the "s3" endpoint: objects in an Amazon S3 bucket or an
// S3-compatible store (MinIO, Ceph, Cloudflare R2, …), as a sink that
// writes each stream as one object and as a source that reads objects
// back for a restore.
//
// The sink buffers a stream into parts of part_size (raised so an object
// never needs more than 10,000 parts), uploads up to concurrency of them at
// once with checksums the store verifies, and completes the multipart upload
// only at Commit; a failure, Abort or a cancelled context aborts it, so
// nothing appears at a key before Commit and no upload is left behind. It
// also lists, reads back and removes objects (sdk.Storage) so that pipe can
// read manifests and apply retention. The source reads an object with
// parallel ranged GETs reassembled in order, concurrency × part_size bytes
// at most, resuming a range that broke off from its last byte.
//
// Requests go through an HTTP transport tuned for bulk transfer: an idle
// connection pool sized for parallel parts, large read and write buffers,
// no transparent compression, and a stall timeout on every connection.
//
// It imports the plugin SDK and the AWS SDK only, never the engine or
// another plugin. It must not buffer more than MemoryEstimator reports, and
// it must never put credentials into an error, a log line or an object.
package s3
