package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []int // milliseconds
		want time.Duration
	}{
		{"none", nil, 0},
		{"one", []int{7}, ms(7)},
		{"odd count, unsorted", []int{30, 10, 20}, ms(20)},
		{"even count: the mean of the middle two", []int{40, 10, 30, 20}, ms(25)},
		{"repeated values", []int{5, 5, 9, 5}, ms(5)},
		{"an outlier does not move it", []int{100, 101, 99, 10_000, 102}, ms(101)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := msList(tc.in...)
			before := slices.Clone(in)
			if got := median(in); got != tc.want {
				t.Errorf("median(%v) = %v, want %v", in, got, tc.want)
			}
			if !slices.Equal(in, before) {
				t.Errorf("median reordered its input: %v, was %v", in, before)
			}
		})
	}
}

func TestMinMax(t *testing.T) {
	for _, tc := range []struct {
		in       []int
		min, max time.Duration
	}{
		{[]int{3}, ms(3), ms(3)},
		{[]int{3, 1, 2}, ms(1), ms(3)},
		{[]int{2, 9, 9, 4}, ms(2), ms(9)},
	} {
		in := msList(tc.in...)
		if got := minD(in); got != tc.min {
			t.Errorf("minD(%v) = %v, want %v", in, got, tc.min)
		}
		if got := maxD(in); got != tc.max {
			t.Errorf("maxD(%v) = %v, want %v", in, got, tc.max)
		}
	}
}

func TestRatios(t *testing.T) {
	for _, tc := range []struct {
		name             string
		pipe, ref        time.Duration
		timeRatio, speed float64
	}{
		{"pipe twice as fast", ms(100), ms(200), 0.5, 2},
		{"pipe slower", ms(410), ms(325), 410.0 / 325, 325.0 / 410},
		{"as fast", ms(7), ms(7), 1, 1},
		// An exact target is met: 90/100 is 0.9 itself, where the ratio
		// of two times in seconds is 0.8999999999999999.
		{"a ratio exactly at a target", ms(100), ms(90), 100.0 / 90, 0.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := timeRatio(tc.pipe, tc.ref); got != tc.timeRatio {
				t.Errorf("timeRatio = %v, want %v", got, tc.timeRatio)
			}
			if got := speedup(tc.pipe, tc.ref); got != tc.speed {
				t.Errorf("speedup = %v, want %v", got, tc.speed)
			}
		})
	}
	if got := speedup(ms(100), ms(90)); !(got >= 0.9) {
		t.Errorf("speedup(100 ms, 90 ms) = %v misses a 0.9 target", got)
	}
}

func TestThroughput(t *testing.T) {
	for _, tc := range []struct {
		bytes int64
		d     time.Duration
		mbps  float64
		rate  string
	}{
		{600_000_000, time.Second, 600, "600 MB/s"},
		{600_000_000, ms(410), 1463.414634, "1463 MB/s"},
		{2 << 30, ms(9450), 227.246, "227 MB/s"},
		{1, 0, 0, "0 MB/s"}, // no time: no rate, not +Inf
		{1, -time.Second, 0, "0 MB/s"},
	} {
		if got := mbps(tc.bytes, tc.d); math.Abs(got-tc.mbps) > 0.001 {
			t.Errorf("mbps(%d, %v) = %f, want %f", tc.bytes, tc.d, got, tc.mbps)
		}
		if got := rate(tc.bytes, tc.d); got != tc.rate {
			t.Errorf("rate(%d, %v) = %q, want %q", tc.bytes, tc.d, got, tc.rate)
		}
	}
}

func TestNearestIndex(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		to   int
		want int
	}{
		{[]int{10}, 99, 0},
		{[]int{30, 10, 20}, 20, 2},
		{[]int{30, 10, 20}, 24, 2},
		{[]int{30, 10, 20}, 26, 0},
		{[]int{10, 20, 30, 40}, 25, 1}, // a tie: the first
	} {
		if got := nearestIndex(msList(tc.in...), ms(tc.to)); got != tc.want {
			t.Errorf("nearestIndex(%v, %dms) = %d, want %d", tc.in, tc.to, got, tc.want)
		}
	}
}

func TestBottlenecks(t *testing.T) {
	runs := func(names ...string) []pipelineRun {
		out := make([]pipelineRun, len(names))
		for i, n := range names {
			out[i].Bottleneck = n
		}
		return out
	}
	for _, tc := range []struct {
		name string
		runs []pipelineRun
		want string
	}{
		{"none ran", nil, ""},
		{"always the same", runs("compress", "compress"), "compress (2/2)"},
		{"most named first", runs("sink fs", "compress", "sink fs"), "sink fs (2/3), compress (1/3)"},
		{"a tie: by name", runs("sink fs", "compress"), "compress (1/2), sink fs (1/2)"},
		{"none named", runs("", "source"), "(none) (1/2), source (1/2)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bottlenecks(tc.runs); got != tc.want {
				t.Errorf("bottlenecks = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStages(t *testing.T) {
	a, b := fakeSummary("compress", 1.0), fakeSummary("compress", 2.0)
	b.Stages = b.Stages[:1]
	for _, tc := range []struct {
		name  string
		runs  []pipelineRun
		times []int
		want  string
	}{
		{"no runs", nil, nil, ""},
		{"runs and times disagree", []pipelineRun{a}, []int{1, 2}, ""},
		{"the run nearest the median", []pipelineRun{a, b, a}, []int{100, 210, 300},
			"source 6% (0.00s / 3.00s); run 2.00s"},
		{"workers shown when more than one", []pipelineRun{a}, []int{100},
			"source 6% (0.00s / 3.00s); compress ×2 99% (0.02s / 3.29s); sink fs 5% (3.15s / 0.00s); run 1.00s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stages(tc.runs, msList(tc.times...)); got != tc.want {
				t.Errorf("stages = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestFastestSweepPoint(t *testing.T) {
	points := []sweepPoint{{8 << 20, 4, ms(300)}, {16 << 20, 8, ms(200)}, {64 << 20, 8, ms(250)}, {32 << 20, 16, ms(200)}}
	if got := fastest(points); got != points[1] {
		t.Errorf("fastest = %+v, want %+v (the first of the fastest)", got, points[1])
	}
}

func TestTurboRatio(t *testing.T) {
	s := sectionOf[*pgResult](t, fakeReport(), "postgres").backup
	// turbo 6.21 s against the shell's 6.38 s
	if got := turboRatio(s); math.Abs(got-6210.0/6380.0) > 1e-9 {
		t.Errorf("turboRatio = %f, want %f", got, 6210.0/6380.0)
	}
	s.refs = s.refs[:2]
	if got := turboRatio(s); !math.IsInf(got, 1) {
		t.Errorf("turboRatio without a turbo run = %f, want +Inf", got)
	}
}

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		n       int64
		mb, mib string
	}{
		{0, "0 MB", "0 MiB"},
		{600_000_000, "600 MB", "572 MiB"},
		{1 << 30, "1074 MB", "1 GiB"},
		{8 << 30, "8590 MB", "8 GiB"},
		{1<<30 + 1<<20, "1075 MB", "1025 MiB"},
		{148 << 20, "155 MB", "148 MiB"},
	} {
		if got := mb(tc.n); got != tc.mb {
			t.Errorf("mb(%d) = %q, want %q", tc.n, got, tc.mb)
		}
		if got := mib(tc.n); got != tc.mib {
			t.Errorf("mib(%d) = %q, want %q", tc.n, got, tc.mib)
		}
	}
}
