package tune

import (
	"strings"
	"testing"
)

const mib = 1 << 20

func row(name string, rate float64, budget int64, stored int64) Row {
	return Row{Variant: Variant{Name: name}, ReadPerSec: rate, Budget: budget, ReadBytes: 400 * mib, StoredBytes: stored}
}

func TestRecommend(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rows   []Row
		want   string
		reason string
	}{
		{"fastest", []Row{row("a", 100, 100, 100*mib), row("b", 200, 300, 100*mib), row("c", 150, 50, 100*mib)},
			"b", "the fastest (200 B/s), 33% ahead of c"},
		{"within 5% and smaller", []Row{row("a", 100, 100, 100*mib), row("b", 200, 300, 100*mib), row("c", 192, 200, 100*mib)},
			"c", "within 5% of the fastest, b (192 B/s against 200 B/s), with a memory budget of 200 B instead of 300 B"},
		{"tie on budget: the faster", []Row{row("a", 199, 100, 100*mib), row("b", 200, 100, 100*mib)},
			"b", "the fastest (200 B/s), 1% ahead of a"},
		{"worse ratio is said", []Row{row("level3", 100, 100, 100*mib), row("level1", 200, 100, 150*mib)},
			"level1", "it stores 50% more than level3 (2.67× against 4.00×)"},
		{"one", []Row{row("only", 10, 1, 1)}, "only", "the only variant tried"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, reason := Recommend(tc.rows)
			if tc.rows[i].Name != tc.want || !strings.Contains(reason, tc.reason) {
				t.Fatalf("recommend = %s, %q; want %s, %q", tc.rows[i].Name, reason, tc.want, tc.reason)
			}
		})
	}
}

// The rules at their edges: 5% slower still counts as within 5%, a little
// more does not; among several within 5%, the smallest budget wins; the
// storage line appears only past a 5% better ratio, and also for a pick
// made for its memory; a second variant that moved nothing is not compared.
func TestRecommendEdges(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rows    []Row
		want    string
		reason  string // the whole line
		without string // a part it must not have
	}{
		{"exactly 5% slower is within", []Row{row("fast", 200, 300, 100*mib), row("lean", 190, 100, 100*mib)},
			"lean", "within 5% of the fastest, fast (190 B/s against 200 B/s), with a memory budget of 100 B instead of 300 B", ""},
		{"more than 5% slower is not", []Row{row("fast", 200, 300, 100*mib), row("lean", 189, 100, 100*mib)},
			"fast", "the fastest (200 B/s), 6% ahead of lean", ""},
		{"the smallest budget within 5%", []Row{row("fast", 200, 300, 100*mib), row("mid", 198, 200, 100*mib), row("lean", 195, 100, 100*mib), row("slow", 100, 10, 100*mib)},
			"lean", "within 5% of the fastest, fast (195 B/s against 200 B/s), with a memory budget of 100 B instead of 300 B", ""},
		{"a ratio 5% better is not worth a line", []Row{row("a", 200, 100, 100*mib), row("b", 100, 100, 96*mib)},
			"a", "the fastest (200 B/s), 100% ahead of b", "stores"},
		{"the lean pick's storage cost", []Row{row("fast", 200, 300, 100*mib), row("lean", 195, 100, 200*mib)},
			"lean", "within 5% of the fastest, fast (195 B/s against 200 B/s), with a memory budget of 100 B instead of 300 B; it stores 100% more than fast (2.00× against 4.00×)", ""},
		{"the other moved nothing", []Row{row("a", 200, 100, 100*mib), row("b", 0, 100, 0)},
			"a", "the fastest (200 B/s)", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i, reason := Recommend(tc.rows)
			if tc.rows[i].Name != tc.want || reason != tc.reason || tc.without != "" && strings.Contains(reason, tc.without) {
				t.Fatalf("recommend = %s, %q; want %s, %q", tc.rows[i].Name, reason, tc.want, tc.reason)
			}
		})
	}
}
