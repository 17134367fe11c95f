package main

import (
	"fmt"
	"slices"
	"time"
)

// median of the durations (the mean of the middle two for an even count).
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// mbps is bytes per wall time in MB/s (10^6 bytes).
func mbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / 1e6 / d.Seconds()
}

func rate(n int64, d time.Duration) string {
	return fmt.Sprintf("%.0f MB/s", mbps(n, d))
}

// nearestIndex returns the index of the duration closest to d.
func nearestIndex(ds []time.Duration, d time.Duration) int {
	best := 0
	for i, x := range ds {
		if (x - d).Abs() < (ds[best] - d).Abs() {
			best = i
		}
	}
	return best
}
