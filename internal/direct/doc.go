// Package direct moves a whole stream between a file and an endpoint
// without the engine's chunks: Fill has a source write a stream into a
// file (an object store's ranges each straight to its place), SendFile has
// an object take a regular file at once (an upload's parts read from where
// they lie). The engine uses both for streams without stages but observers
// (a checksum, fed by reading the file back as far as Fill's prefix tells
// it is written); the plugin server (plugins/sdk/plugin) runs them on the
// plugin's side, and the host's stand-ins for a plugin's source and object (plugins/host)
// implement Filler and FileSender to pass the file across.
//
// The capabilities an endpoint implements for this (sdk.WriterAtTo,
// sdk.ReaderAtFrom, sdk.FileReader, sdk.FileWriter) and the errors that
// say which side failed (sdk.ReadError, sdk.WriteError) are the SDK's;
// Filler and FileSender are here because only pipe's own stand-ins
// implement them, and plugin authors should not see them.
//
// It imports plugins/sdk and nothing else of pipe: the plugin server, which
// every plugin binary links, imports it.
package direct
