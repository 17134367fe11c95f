//go:build !linux

package procmem

// Snapshot knows no processes here.
func Snapshot() map[int]Stat { return map[int]Stat{} }

// Children knows no processes here.
func Children() map[int][]int { return map[int][]int{} }

// Tree is pid alone here.
func Tree(pid int) []int { return []int{pid} }

// ReadStat is unknown here.
func ReadStat(pid int) (Stat, bool) { return Stat{}, false }

// Exe is unknown here.
func Exe(pid int) string { return "" }

// Cmdline is unknown here.
func Cmdline(pid int) string { return "" }

// Owner is unknown here.
func Owner(pid int) (uid int, ok bool) { return 0, false }

// Field is unknown here.
func Field(pid int, file, key string) (n int64, ok bool) { return 0, false }

// ResetPeak does nothing here.
func ResetPeak(pid int) {}
