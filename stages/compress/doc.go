// Package compress provides the compress and decompress stages: zstd, gzip
// and lz4, each compressing every chunk as an independent frame (gzip: an
// independent member) with one single-threaded encoder per worker, so the
// output is a standard multi-frame file the codec's own tool reads, and
// decompress can process the frames of one stream in parallel.
//
// It must not import a plugin or the CLI.
package compress
