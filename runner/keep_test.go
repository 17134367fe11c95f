package runner_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/runner"
)

// calendarRuns are a pipeline's runs, newest first, in local time (the
// calendar rules' time).
func calendarRuns() (*catalog.Catalog, map[string]*catalog.Run) {
	at := func(s string) time.Time {
		t, err := time.ParseInLocation("2006-01-02 15:04", s, time.Local)
		if err != nil {
			panic(err)
		}
		return t
	}
	runs := []struct {
		name, at string
		partial  bool
		pinned   bool
	}{
		{"R1", "2026-11-28 14:00", false, false}, // Saturday, ISO week 48
		{"R2", "2026-11-28 02:00", false, false}, // the same day, older
		{"R3", "2026-11-26 02:00", false, false},
		{"R4", "2026-11-23 02:00", false, false}, // Monday of week 48
		{"R5", "2026-11-22 02:00", false, false}, // Sunday of week 47
		{"R6", "2026-11-01 02:00", false, false},
		{"R7", "2026-10-31 02:00", false, false},
		{"R8", "2026-10-15 02:00", true, false}, // partial: never stands for a period
		{"R9", "2026-10-14 02:00", false, false},
		{"R10", "2025-12-31 02:00", false, false},
		{"R11", "2024-06-01 02:00", false, true},
	}
	cat := &catalog.Catalog{}
	byName := map[string]*catalog.Run{}
	for _, r := range runs {
		m := &manifest.Manifest{RunID: r.name, Pipeline: "nightly", StartedAt: at(r.at), FinishedAt: at(r.at)}
		if r.partial {
			m.Failed = []manifest.Failed{{Stream: "db2", Error: "failed"}}
		}
		cr := &catalog.Run{Key: r.name + "/pipe-manifest.json", Manifest: m, Pinned: r.pinned}
		cat.Runs = append(cat.Runs, cr)
		byName[r.name] = cr
	}
	return cat, byName
}

func names(rs []*catalog.Run) string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Manifest.RunID)
	}
	return strings.Join(out, " ")
}

func TestCalendarRetention(t *testing.T) {
	cat, runs := calendarRuns()
	rule := pipefile.Retention{Daily: 3, Weekly: 2, Monthly: 2, Yearly: 2}
	rp, err := runner.PlanRetention(cat, runner.Keep{Pipeline: "nightly", Rule: rule}, time.Date(2026, 11, 28, 15, 0, 0, 0, time.Local))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(rp.Keep), "R1 R3 R4 R5 R7 R10 R11"; got != want {
		t.Errorf("kept %s, want %s", got, want)
	}
	if got, want := names(rp.Drop), "R2 R6 R8 R9"; got != want {
		t.Errorf("dropped %s, want %s", got, want)
	}
	for name, want := range map[string][]string{
		"R1":  {"keep_daily = 3 (2026-11-28)", "keep_weekly = 2 (2026-W48)", "keep_monthly = 2 (2026-11)", "keep_yearly = 2 (2026)"},
		"R3":  {"keep_daily = 3 (2026-11-26)"},
		"R4":  {"keep_daily = 3 (2026-11-23)"},
		"R5":  {"keep_weekly = 2 (2026-W47)"},
		"R7":  {"keep_monthly = 2 (2026-10)"},
		"R10": {"keep_yearly = 2 (2025)"},
		"R11": {"pinned"},
	} {
		if got := rp.Why[runs[name].Key]; !slices.Equal(got, want) {
			t.Errorf("%s is kept by %q, want %q", name, got, want)
		}
	}
}

// What the next run's retention deletes: the next run takes today's day,
// week, month and year.
func TestCalendarRetentionAfterNext(t *testing.T) {
	cat, _ := calendarRuns()
	rule := pipefile.Retention{Daily: 3, Weekly: 2, Monthly: 2, Yearly: 2}
	next := time.Date(2026, 11, 29, 10, 0, 0, 0, time.Local) // Sunday of week 48
	rp, err := runner.PlanRetention(cat, runner.Keep{Pipeline: "nightly", Rule: rule, Next: next}, next)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(rp.Keep), "R1 R3 R5 R7 R10 R11"; got != want {
		t.Errorf("kept %s, want %s", got, want)
	}
}

// Calendar rules and keep_last add up; a partial run newer than every
// complete one is kept by keep_last without counting.
func TestCalendarAndLast(t *testing.T) {
	cat, runs := calendarRuns()
	m := &manifest.Manifest{RunID: "R0", Pipeline: "nightly", FinishedAt: runs["R1"].Manifest.FinishedAt.Add(time.Hour),
		Failed: []manifest.Failed{{Stream: "db2", Error: "failed"}}}
	cat.Runs = append([]*catalog.Run{{Key: "R0/pipe-manifest.json", Manifest: m}}, cat.Runs...)
	rp, err := runner.PlanRetention(cat, runner.Keep{Pipeline: "nightly", Rule: pipefile.Retention{Last: 2, Monthly: 1}}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(rp.Keep), "R0 R1 R2 R11"; got != want {
		t.Errorf("kept %s, want %s", got, want)
	}
	if got, want := rp.Why[runs["R1"].Key], []string{"keep_last = 2", "keep_monthly = 1 (2026-11)"}; !slices.Equal(got, want) {
		t.Errorf("R1 is kept by %q, want %q", got, want)
	}
}
