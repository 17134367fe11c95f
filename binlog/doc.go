// Package binlog archives MariaDB's binary log: it is what pipe binlog
// archive runs beside the server, and what pipe binlog list, verify and
// fetch read.
//
// The archiver reads the server's binlog files where the server writes
// them (log_bin_basename.NNNNNN, listed in log_bin_basename.index), the
// one being written included, and stores each as a run of segments, each
// a byte range of the file, compressed and encrypted on its own:
//
//	<root><server_id>/<file>.<start>-<end>-<sha256 of the object><ext>
//
// start and end are 12 hex digits. A segment is stored when part_size
// bytes wait, or when the oldest waiting byte has waited max_lag, so the
// archive trails the server by about max_lag. Objects are created once,
// never overwritten (the store's exclusive create), and committed whole:
// a killed archiver leaves nothing under a final name, and the next one
// lists the archive and goes on from the end of each file's contiguous
// segments. The server id comes from the files themselves (the first
// event's header), so servers share an archive without meeting.
//
// The server clears a file's in-use flag (in its first event) when it
// closes the file: fetch clears it too in every file a later one follows,
// so a fetched file is the server's, byte for byte.
//
// It knows stores through the plugin SDK's Sink and Storage interfaces;
// it must not import the runner or a concrete plugin.
package binlog
