package sdk

import (
	"fmt"
	"time"
)

// ParsePointInTime reads a point in time a restore recovers to (see
// Attribute.Target): RFC 3339, or as PostgreSQL writes a timestamp with a
// time zone ("2026-11-26 10:00:00+00", "2026-11-26 10:00:00.5+01:00",
// "2026-11-26 10:00:00 UTC"). The zone is required: a server would read a
// time without one in its own zone, and pipe could choose the wrong run.
func ParsePointInTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999Z07:00", "2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999 Z07:00", "2006-01-02 15:04:05.999999999 MST"} {
		if t, err := time.Parse(layout, s); err == nil {
			if layout == "2006-01-02 15:04:05.999999999 MST" && t.Location() != time.UTC {
				continue // a zone abbreviation Go cannot place
			}
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf(`%q is not a time with its zone: write e.g. "2026-11-26 10:00:00+00" or "2026-11-26T10:00:00Z"`, s)
}
