package runner

import (
	"fmt"
	"time"

	"github.com/pipebackup/pipe/catalog"
)

// period is a calendar rule of retention: keep the newest complete run of
// each of the last n periods that have one.
type period struct {
	attr   string
	n      int
	bucket func(t time.Time) string
}

// keeper goes through a pipeline's runs, newest first, and says which
// rules keep each.
type keeper struct {
	k       Keep
	now     time.Time
	n       int // complete runs seen
	periods []period
	last    []string // each period's newest bucket kept
	kept    []int    // each period's buckets kept
}

func (k Keep) keeper(now time.Time) *keeper {
	kr := &keeper{k: k, now: now, periods: []period{
		{"keep_daily", k.Rule.Daily, func(t time.Time) string { return t.Format("2006-01-02") }},
		{"keep_weekly", k.Rule.Weekly, func(t time.Time) string { y, w := t.ISOWeek(); return fmt.Sprintf("%d-W%02d", y, w) }},
		{"keep_monthly", k.Rule.Monthly, func(t time.Time) string { return t.Format("2006-01") }},
		{"keep_yearly", k.Rule.Yearly, func(t time.Time) string { return t.Format("2006") }},
	}}
	kr.last, kr.kept = make([]string, len(kr.periods)), make([]int, len(kr.periods))
	if !k.Next.IsZero() { // the next run comes first, and fills its periods
		kr.n = 1
		for i, p := range kr.periods {
			kr.last[i], kr.kept[i] = p.bucket(k.Next.Local()), 1
		}
	}
	return kr
}

// why returns the rules that keep r, none when retention deletes it. Runs
// come newest first.
func (kr *keeper) why(r *catalog.Run) []string {
	m, rule := r.Manifest, kr.k.Rule
	var why []string
	if m.RunID == kr.k.Current {
		why = append(why, "the current run")
	}
	if r.Pinned {
		why = append(why, "pinned")
	}
	if !rule.Set() {
		why = append(why, "no retention rule")
	}
	if rule.Last > 0 && kr.n < rule.Last {
		why = append(why, fmt.Sprintf("keep_last = %d", rule.Last))
	}
	if rule.Within > 0 && kr.now.Sub(m.FinishedAt) <= rule.Within {
		why = append(why, fmt.Sprintf("keep_within = %s", rule.Within))
	}
	if m.Partial() || m.Damaged() {
		// A partial run (some of a cluster's databases failed) or a
		// damaged one (a page whose checksum failed) is kept while it is
		// newer than the last complete run kept, but it never counts as
		// one: it cannot stand in for an older complete run, which may
		// hold the damaged part intact.
		return why
	}
	kr.n++
	t := m.FinishedAt.Local()
	for i, p := range kr.periods {
		if b := p.bucket(t); p.n > 0 && b != kr.last[i] && kr.kept[i] < p.n {
			why = append(why, fmt.Sprintf("%s = %d (%s)", p.attr, p.n, b))
			kr.last[i] = b
			kr.kept[i]++
		}
	}
	return why
}
