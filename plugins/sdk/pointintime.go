package sdk

import (
	"fmt"
	"strconv"
	"strings"
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

// ParseLSN reads a position in PostgreSQL's write-ahead log as the server
// prints it ("16/B374D848"): the other point a Target attribute may hold,
// which a base backup's run reaches when its stop_lsn fact is at or
// before it.
func ParseLSN(s string) (uint64, error) {
	hi, lo, ok := strings.Cut(s, "/")
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if !ok || err1 != nil || err2 != nil || strings.HasPrefix(hi, "+") || strings.HasPrefix(lo, "+") {
		return 0, fmt.Errorf("%q is not a WAL position: write it as PostgreSQL prints one, e.g. \"0/3000060\"", s)
	}
	return h<<32 | l, nil
}
