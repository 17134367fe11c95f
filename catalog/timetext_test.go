package catalog

import (
	"strings"
	"testing"
	"time"
)

// A restore that asks for a run finished before a time a fraction of a
// second before the oldest run's end says both times apart: with whole
// seconds the message read "before 17:42:37 …; the oldest finished at
// 17:42:37".
func TestSelectBeforeNamesFractions(t *testing.T) {
	st := memStore{}
	finished := time.Date(2026, 11, 20, 17, 42, 37, 600_000_000, time.UTC)
	st.run(t, "nightly", "20261120T174236Z-aaaaaa", finished, "a")
	c, err := Read(t.Context(), st)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Date(2026, 11, 20, 18, 42, 37, 250_000_000, time.FixedZone("", 3600))
	_, err = c.Select(Selection{Before: before})
	if err == nil {
		t.Fatal("a run that finished after the time was chosen")
	}
	for _, want := range []string{"before 2026-11-20T17:42:37.25Z", "finished at 2026-11-20T17:42:37.6Z"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if got := TimeText(time.Date(2026, 11, 20, 17, 42, 37, 0, time.UTC)); got != "2026-11-20T17:42:37Z" {
		t.Errorf("a whole second reads %q", got)
	}
}
