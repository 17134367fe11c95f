package plan

import (
	"fmt"
	"io"

	"github.com/pipebackup/pipe/pipefile"
)

// DrillJSON is a drill block in the plan.
type DrillJSON struct {
	Name     string   `json:"name"`
	Pipeline string   `json:"pipeline"`
	Image    string   `json:"image"`
	Checks   []string `json:"checks"`
	Amcheck  bool     `json:"amcheck,omitempty"`
	Timeout  float64  `json:"timeout_seconds"`
}

func drillJSON(d *pipefile.Drill) DrillJSON {
	j := DrillJSON{Name: d.Name, Pipeline: d.Pipeline, Image: d.Image, Checks: []string{}, Amcheck: d.Amcheck, Timeout: d.Timeout.Seconds()}
	for _, c := range d.Checks {
		j.Checks = append(j.Checks, c.Name)
	}
	return j
}

// printDrill writes a drill block's line.
func printDrill(w io.Writer, d *pipefile.Drill) {
	amcheck := ""
	if d.Amcheck {
		amcheck = " and pg_amcheck"
	}
	fmt.Fprintf(w, "drill %q: pipe drill restores through pipeline %q into a scratch %s container, then runs %s%s; timeout %s\n",
		d.Name, d.Pipeline, d.Image, Plural(len(d.Checks), "check"), amcheck, d.Timeout)
}
