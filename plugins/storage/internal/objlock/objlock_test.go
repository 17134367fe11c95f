package objlock

import (
	"strings"
	"testing"
	"time"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		cfg Config
		err string
	}{
		{Default(), ""},
		{Config{Days: 35, Mode: "Compliance"}, ""},
		{Config{Days: 7, Mode: "GOVERNANCE"}, ""},
		{Config{Days: 7, Mode: "legal"}, "unknown object lock mode"},
		{Config{Days: -1, Mode: "compliance"}, "invalid object lock"},
		{Config{Days: 40000, Mode: "compliance"}, "invalid object lock"},
	} {
		d := c.cfg.Check()
		switch {
		case c.err == "" && d.HasErrors():
			t.Errorf("%+v: %v", c.cfg, d)
		case c.err != "" && (!d.HasErrors() || !strings.Contains(d[0].Summary, c.err)):
			t.Errorf("%+v: %v, want %q", c.cfg, d, c.err)
		}
	}
}

// Every object locks but the index and pins; governance only when asked.
func TestLocks(t *testing.T) {
	c := Config{Days: 3, Mode: "compliance"}
	for key, want := range map[string]bool{"r1/base.tar.zst.age": true, "r1/pipe-manifest.json": true, "1/00000001/000000010000000000000001.claim": true,
		"pipe-index.json": false, "pg/pipe-index.json": false, "r1/pipe-manifest.json.pin": false} {
		if got := c.Locks(key); got != want {
			t.Errorf("%s: locks %v, want %v", key, got, want)
		}
	}
	if Default().Locks("r1/a.zst") {
		t.Error("no days, yet a lock")
	}
	if !c.Compliance() || (Config{Days: 3, Mode: "Governance"}).Compliance() {
		t.Error("compliance is the default, governance only when asked")
	}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.FixedZone("CET", 3600))
	if got := c.Until(now); !got.Equal(now.Add(72*time.Hour)) || got.Location() != time.UTC {
		t.Errorf("until %v, want three days later, in UTC", got)
	}
}
