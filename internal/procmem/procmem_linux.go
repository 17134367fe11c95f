//go:build linux

package procmem

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// userHZ is the unit of the CPU times in /proc/PID/stat: USER_HZ, 100 on
// every Linux architecture whatever the kernel's own tick.
const userHZ = 100

// Snapshot reads every process's /proc/PID/stat once, by pid. A process
// that ends while it is read is left out.
func Snapshot() map[int]Stat {
	stats := map[int]Stat{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := ReadStat(pid); ok {
			stats[pid] = st
		}
	}
	return stats
}

// Children maps each process's pid to its children's, from every
// /proc/PID/stat.
func Children() map[int][]int {
	return childrenOf(Snapshot())
}

// Tree lists pid and every process descended from it, pid first, each
// parent before its children.
func Tree(pid int) []int {
	return treeOf(pid, Children())
}

// ReadStat reads /proc/PID/stat; ok is false when the process is gone or
// the file cannot be parsed.
func ReadStat(pid int) (Stat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, false
	}
	return parseStat(string(b), int64(os.Getpagesize()))
}

// Exe is the path of the executable pid runs ("" when it cannot be read:
// the process is gone, or belongs to another user).
func Exe(pid int) string {
	exe, _ := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	return exe
}

// Cmdline is pid's command line, its arguments joined by spaces (each
// argument followed by one); "" for a process gone or a kernel thread.
func Cmdline(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// Owner is the user id pid runs as.
func Owner(pid int) (uid int, ok bool) {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/"+strconv.Itoa(pid), &st); err != nil {
		return 0, false
	}
	return int(st.Uid), true
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

// parseStat reads the line of /proc/PID/stat: "pid (comm) state ppid …",
// where comm may hold spaces and parentheses, so the fields are counted
// from its last ')'. pageSize converts the RSS from pages.
func parseStat(s string, pageSize int64) (Stat, bool) {
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return Stat{}, false
	}
	// After comm: state(0) ppid(1) … utime(11) stime(12) … starttime(19)
	// vsize(20) rss(21).
	f := strings.Fields(s[end+1:])
	if len(f) < 22 {
		return Stat{}, false
	}
	ppid, err := strconv.Atoi(f[1])
	if err != nil {
		return Stat{}, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	start, _ := strconv.ParseInt(f[19], 10, 64)
	rss, _ := strconv.ParseInt(f[21], 10, 64)
	return Stat{
		PPid:  ppid,
		Comm:  s[open+1 : end],
		CPU:   time.Duration(ut+st) * time.Second / userHZ,
		RSS:   rss * pageSize,
		Start: start,
	}, true
}
