package sdk

import (
	"fmt"
	"strconv"
	"time"
)

// ParseAge reads an age as pipe files write it: a number and a unit of
// m, h, d or w ("30d", "12h", "2w"), or a Go duration ("36h30m").
func ParseAge(s string) (time.Duration, error) {
	units := map[byte]time.Duration{'m': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour, 'w': 7 * 24 * time.Hour}
	if len(s) >= 2 {
		if u, ok := units[s[len(s)-1]]; ok {
			if n, err := strconv.Atoi(s[:len(s)-1]); err == nil && n > 0 {
				return time.Duration(n) * u, nil
			}
		}
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not an age: write e.g. \"30d\", \"12h\" or \"2w\"", s)
	}
	return d, nil
}
