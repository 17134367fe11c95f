package sdk

import (
	"testing"
	"time"
)

func TestParsePointInTime(t *testing.T) {
	want := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
	for _, s := range []string{"2026-11-26T10:00:00Z", "2026-11-26 10:00:00+00", "2026-11-26 11:00:00+01:00", "2026-11-26 10:00:00 UTC", "2026-11-26 05:00:00-05"} {
		got, err := ParsePointInTime(s)
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v %v, want %v", s, got, err, want)
		}
	}
	if got, err := ParsePointInTime("2026-11-26 10:00:00.25+00"); err != nil || got.Nanosecond() != 250e6 {
		t.Errorf("fractions: %v %v", got, err)
	}
	// Without a zone the server would read it in its own: refused.
	for _, s := range []string{"2026-11-26 10:00:00", "2026-11-26", "yesterday", "2026-11-26 10:00:00 CET"} {
		if _, err := ParsePointInTime(s); err == nil {
			t.Errorf("%q was accepted", s)
		}
	}
}

func TestParseLSN(t *testing.T) {
	for s, want := range map[string]uint64{"0/3000060": 0x3000060, "16/B374D848": 0x16_B374D848, "FFFFFFFF/FFFFFFFF": 1<<64 - 1} {
		if got, err := ParseLSN(s); err != nil || got != want {
			t.Errorf("%q: %x %v, want %x", s, got, err, want)
		}
	}
	for _, s := range []string{"3000060", "0/", "/1", "0/123456789", "0/+1", "2026-11-26 10:00:00+00", "", "0", "G/1", "1/2/3"} {
		if _, err := ParseLSN(s); err == nil {
			t.Errorf("%q was accepted", s)
		}
	}
}
