// Package exec is the "exec" endpoint: any command's standard output as a
// stream (clickhouse-client, mongodump --archive, …) and any command's
// standard input as a sink, once per stream. A command that exits non-zero
// fails the stream with the end of its stderr in the error.
//
// It imports the plugin SDK only, never the engine or another plugin.
package exec
