// Package all wires pipe's built-in endpoints into one plugin set. The CLI
// imports it; the engine and the plugins themselves never do. Each built-in
// adds itself in a file of its own (fs.go, exec.go, …).
package all

import (
	"fmt"

	"github.com/pipebackup/pipe/internal/version"
	"github.com/pipebackup/pipe/plugins/sdk"
)

var (
	sources = map[string]sdk.SourceType{}
	sinks   = map[string]sdk.SinkType{}
)

// add registers a built-in endpoint type; source or sink may be nil.
func add(name string, source sdk.SourceType, sink sdk.SinkType) {
	if _, dup := sources[name]; dup {
		panic(fmt.Sprintf("built-in endpoint %q registered twice", name))
	}
	if _, dup := sinks[name]; dup {
		panic(fmt.Sprintf("built-in endpoint %q registered twice", name))
	}
	if source != nil {
		sources[name] = source
	}
	if sink != nil {
		sinks[name] = sink
	}
}

// Builtin returns the endpoints compiled into pipe.
func Builtin() sdk.Plugin {
	p := sdk.Plugin{Name: "builtin", Version: version.Version, Sources: map[string]sdk.SourceType{}, Sinks: map[string]sdk.SinkType{}}
	for n, t := range sources {
		p.Sources[n] = t
	}
	for n, t := range sinks {
		p.Sinks[n] = t
	}
	return p
}
