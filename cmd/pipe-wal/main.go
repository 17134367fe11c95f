// Command pipe-wal is pipe wal push for archive_command, quick to start:
//
//	archive_command = 'pipe-wal push /etc/pipe/pg.hcl %p'
//
// It answers for a file a background pusher archived without linking any
// store, and hands every other command to the pipe beside it (package
// quickpush says how). Install it with pipe: make build writes both.
package main

import (
	"os"

	"github.com/pipebackup/pipe/wal/quickpush"
)

func main() { os.Exit(quickpush.Main(os.Args[1:])) }
