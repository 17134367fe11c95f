package tune

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pipebackup/pipe/pipefile"
)

// Report is the bench's outcome, as --json prints it.
type Report struct {
	File     string  `json:"file"`
	Pipeline string  `json:"pipeline"`
	Host     Host    `json:"host"`
	Source   string  `json:"source"`
	Limit    float64 `json:"duration_limit_seconds"`
	Variants []Row   `json:"variants"`
	// Recommended names the recommended variant; Reason says why.
	Recommended string `json:"recommended"`
	Reason      string `json:"reason"`
	// Settings are the lines that keep the recommendation in the file.
	Settings []string `json:"settings,omitempty"`
	// Written says what --write changed, or why it did not.
	Written string `json:"written,omitempty"`
}

// Host is the machine the bench ran on.
type Host struct {
	CPUs   int   `json:"cpus"`
	Memory int64 `json:"memory_bytes"`
}

// Print writes the variants' table, their stages' utilization and the
// recommendation.
func Print(w io.Writer, rep *Report) {
	size := pipefile.HumanSize
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "variant\ttime\tread/s\tstored/s\tratio\tbottleneck\tbudget\tpeak RSS\n")
	anyCut := false
	for _, r := range rep.Variants {
		t := Seconds(r.Seconds)
		if r.Runs > 1 {
			t += fmt.Sprintf(" (%d runs)", r.Runs)
		}
		if r.Cut {
			t += "*"
			anyCut = true
		}
		rss := "?"
		if r.PeakRSS >= 0 {
			rss = size(r.PeakRSS)
		}
		bn := r.Bottleneck
		for _, s := range r.Stages {
			if s.Name == r.Bottleneck {
				bn = fmt.Sprintf("%s %.0f%%", s.Name, 100*s.Utilization)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s/s\t%s/s\t%.2f×\t%s\t%s\t%s\n", r.Name, t, size(int64(r.ReadPerSec)), size(int64(r.StoredPerSec)), ratio(r), bn, size(r.Budget), rss)
	}
	tw.Flush()
	if anyCut {
		fmt.Fprintf(w, "* cut by --duration %s; measured over the bytes it moved\n", time.Duration(rep.Limit*float64(time.Second)))
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "utilization")
	for _, s := range rep.Variants[0].Stages {
		fmt.Fprintf(tw, "\t%s", s.Name)
	}
	fmt.Fprintln(tw)
	for _, r := range rep.Variants {
		fmt.Fprint(tw, r.Name)
		for _, s := range r.Stages {
			cell := fmt.Sprintf("%.0f%%", 100*s.Utilization)
			if s.Workers > 1 {
				cell += fmt.Sprintf(" ×%d", s.Workers)
			}
			fmt.Fprintf(tw, "\t%s", cell)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintln(w, "(busy time ÷ (time × workers); peak RSS: pipe and its plugin processes)")

	fmt.Fprintf(w, "\nrecommended: %s — %s\n", rep.Recommended, rep.Reason)
	if len(rep.Settings) > 0 && (rep.Written == "" || strings.HasPrefix(rep.Written, "nothing written")) {
		fmt.Fprintln(w, "to use it, set in the file:")
		for _, s := range rep.Settings {
			fmt.Fprintln(w, "  "+s)
		}
	}
	if rep.Written != "" {
		fmt.Fprintln(w, rep.Written)
	}
}

// Seconds formats a run's time: milliseconds under a second.
func Seconds(s float64) string {
	d := time.Duration(s * float64(time.Second))
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%.1fs", s)
}
