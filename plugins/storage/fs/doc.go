// Package fs is the "fs" endpoint: local files and folders as a source (a
// file, a folder as one stream per file, or a folder as one tar stream) and
// as a sink that never leaves a partial file at a final path (temp file,
// preallocation when the size is known, one fsync per file, rename, and a
// directory fsync before the run's manifest).
//
// It imports the plugin SDK only, never the engine or another plugin.
package fs
