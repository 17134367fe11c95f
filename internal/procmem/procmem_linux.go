//go:build linux

package procmem

import (
	"os"
	"strconv"
	"strings"
)

// Children maps each process's pid to its children's, from every
// /proc/PID/stat (in /proc's order).
func Children() map[int][]int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) >= 2 {
			ppid, _ := strconv.Atoi(f[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	return children
}

// Field reads the field named key (e.g. "VmRSS:") of /proc/PID/file,
// which the kernel gives in kB, in bytes; ok is false when the file or
// the field cannot be read.
func Field(pid int, file, key string) (n int64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == key {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, true
		}
	}
	return 0, false
}

// ResetPeak sets pid's high-water mark of resident memory (VmHWM) back to
// its current RSS (clear_refs 5); nothing happens where the kernel does
// not let it.
func ResetPeak(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}
