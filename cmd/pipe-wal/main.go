// Command pipe-wal is pipe wal push for archive_command and pipe wal fetch
// for restore_command, quick to start:
//
//	archive_command = 'pipe-wal push /etc/pipe/pg.hcl %p'
//	restore_command = 'pipe-wal fetch /etc/pipe/pg.hcl %f %p'
//
// It answers for a file a background pusher archived, and takes a
// prefetched segment from the spool, without linking any store, and hands
// every other command to the pipe beside it (package quickpush says how).
// Install it with pipe: make build writes both.
package main

import (
	"os"

	"github.com/pipebackup/pipe/wal/quickpush"
)

func main() { os.Exit(quickpush.Main(os.Args[1:])) }
