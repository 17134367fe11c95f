package procmem

import (
	"slices"
	"testing"
)

func TestTreeOf(t *testing.T) {
	for _, tc := range []struct {
		name  string
		stats map[int]Stat
		root  int
		want  []int
	}{
		{"alone", map[int]Stat{10: {PPid: 1}}, 10, []int{10}},
		{"a process the snapshot missed", map[int]Stat{}, 10, []int{10}},
		{"children and grandchildren, parents first, siblings by pid",
			map[int]Stat{10: {PPid: 1}, 30: {PPid: 10}, 20: {PPid: 10}, 40: {PPid: 20}, 50: {PPid: 1}},
			10, []int{10, 20, 30, 40}},
		{"a subtree", map[int]Stat{10: {PPid: 1}, 20: {PPid: 10}, 40: {PPid: 20}}, 20, []int{20, 40}},
		{"a loop from a reused pid ends", map[int]Stat{10: {PPid: 20}, 20: {PPid: 10}}, 10, []int{10, 20}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := treeOf(tc.root, childrenOf(tc.stats)); !slices.Equal(got, tc.want) {
				t.Errorf("treeOf(%d) = %v, want %v", tc.root, got, tc.want)
			}
		})
	}
}
