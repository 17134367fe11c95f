package main

import (
	"fmt"
	"slices"
	"time"
)

// The statistics of the report: medians of a contender's runs, and two
// ratios of medians. A throughput ratio (speedup) is above 1 when pipe is
// faster; a time ratio (timeRatio) is below 1 when pipe is faster. Each
// section says which one its column holds.

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

func minD(ds []time.Duration) time.Duration { return slices.Min(ds) }

func maxD(ds []time.Duration) time.Duration { return slices.Max(ds) }

// timeRatio is pipe's time over the reference's: below 1, pipe is faster.
func timeRatio(pipe, ref time.Duration) float64 { return float64(pipe) / float64(ref) }

// speedup is the reference's time over pipe's, the ratio of their
// throughputs: above 1, pipe is faster (1.2: pipe does the same work in
// 1/1.2 of the time).
func speedup(pipe, ref time.Duration) float64 { return float64(ref) / float64(pipe) }

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

// nearestIndex returns the index of the duration closest to d (the first
// of two as close).
func nearestIndex(ds []time.Duration, d time.Duration) int {
	best := 0
	for i, x := range ds {
		if (x - d).Abs() < (ds[best] - d).Abs() {
			best = i
		}
	}
	return best
}

// mb formats bytes in decimal megabytes (throughputs are MB/s).
func mb(n int64) string { return fmt.Sprintf("%.0f MB", float64(n)/1e6) }

// mib formats bytes in binary units (memory).
func mib(n int64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
}

// fastestMedian is the least of the medians that were measured (not 0: a
// contender left out of its race).
func fastestMedian(ds ...time.Duration) time.Duration {
	var best time.Duration
	for _, d := range ds {
		if d > 0 && (best == 0 || d < best) {
			best = d
		}
	}
	return best
}
