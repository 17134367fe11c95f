//go:build !linux

package procmem

// Children knows no processes here.
func Children() map[int][]int { return map[int][]int{} }

// Field is unknown here.
func Field(pid int, file, key string) (n int64, ok bool) { return 0, false }

// ResetPeak does nothing here.
func ResetPeak(pid int) {}
