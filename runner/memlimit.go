package runner

import (
	"os"
	"runtime/debug"

	"github.com/pipebackup/pipe/plan"
)

// SetMemoryLimit sets the Go runtime's soft memory limit to p's memory
// budget, unless GOMEMLIMIT says otherwise, so that the collector works
// harder before the process outgrows what the plan promised (`pipe run`,
// each trial of `pipe bench`).
func SetMemoryLimit(p *plan.Pipeline) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(p.Budget())
	}
}
