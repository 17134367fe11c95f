// Package all wires pipe's built-in endpoints into one plugin set. The CLI
// imports it; the engine and the plugins themselves never do.
package all

import (
	"github.com/pipebackup/pipe/plugins/command/exec"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/fs"
)

// Version is the version of the built-in endpoints.
const Version = "0.1.0"

// Builtin returns the endpoints compiled into pipe.
func Builtin() sdk.Plugin {
	return sdk.Plugin{
		Name:    "builtin",
		Version: Version,
		Sources: map[string]sdk.SourceType{
			"fs":   fs.SourceType{},
			"exec": exec.SourceType{},
		},
		Sinks: map[string]sdk.SinkType{
			"fs":   fs.SinkType{},
			"exec": exec.SinkType{},
		},
	}
}
