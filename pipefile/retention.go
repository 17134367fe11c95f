package pipefile

import (
	"fmt"
	"strings"
	"time"
)

// Retention is a storage sink's rules of which runs of its pipeline to
// keep; a run no rule keeps is deleted after a successful run and by pipe
// backups prune. Zero fields set no rule.
type Retention struct {
	// Last keeps the newest Last complete runs (keep_last).
	Last int
	// Within keeps the runs that finished within it (keep_within).
	Within time.Duration
	// Daily, Weekly, Monthly and Yearly keep the newest complete run of
	// each of the last that many days, ISO weeks, months and years that
	// have one, in local time (keep_daily, …).
	Daily, Weekly, Monthly, Yearly int
}

// Set reports whether any rule is set.
func (r Retention) Set() bool { return r != Retention{} }

// Attr is the attribute of the first rule set, for diagnostics.
func (r Retention) Attr() string {
	switch {
	case r.Last > 0:
		return "keep_last"
	case r.Within != 0:
		return "keep_within"
	case r.Daily > 0:
		return "keep_daily"
	case r.Weekly > 0:
		return "keep_weekly"
	case r.Monthly > 0:
		return "keep_monthly"
	}
	return "keep_yearly"
}

// String says what the rules keep, for plans: "the last 7 runs, runs of
// the last 720h0m0s, the newest run of each of the last 7 days and 4
// weeks".
func (r Retention) String() string {
	var keep, periods []string
	if r.Last > 0 {
		keep = append(keep, fmt.Sprintf("the last %d %s", r.Last, plural(r.Last, "run")))
	}
	if r.Within > 0 {
		keep = append(keep, "runs of the last "+r.Within.String())
	}
	for _, p := range []struct {
		n    int
		unit string
	}{{r.Daily, "day"}, {r.Weekly, "week"}, {r.Monthly, "month"}, {r.Yearly, "year"}} {
		if p.n > 0 {
			periods = append(periods, fmt.Sprintf("%d %s", p.n, plural(p.n, p.unit)))
		}
	}
	if len(periods) > 0 {
		keep = append(keep, "the newest run of each of the last "+andList(periods)+" (local time)")
	}
	return andList(keep)
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func andList(s []string) string {
	if len(s) <= 1 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
