package tune

import (
	"os"
	"runtime"
	"runtime/debug"

	"github.com/pipebackup/pipe/internal/procmem"
)

// resetPeakRSS starts a new measure of the peak resident memory of pipe
// and its plugin processes: the kernel's high-water mark (VmHWM) is reset
// to the current RSS (Linux; elsewhere nothing happens and peakRSS says
// it does not know).
func resetPeakRSS() {
	runtime.GC()
	debug.FreeOSMemory()
	for _, pid := range selfAndChildren() {
		procmem.ResetPeak(pid)
	}
}

// peakRSS is the sum of the peaks of pipe and its plugin processes since
// resetPeakRSS, or -1. Each process's peak may come at a different moment,
// so the sum bounds the peak of the whole from above.
func peakRSS() int64 {
	var total int64 = -1
	for _, pid := range selfAndChildren() {
		if n, ok := procmem.Field(pid, "status", "VmHWM:"); ok {
			total = max(total, 0) + n
		}
	}
	return total
}

// selfAndChildren lists this process and its children (the plugin
// processes); only this process where /proc is missing.
func selfAndChildren() []int {
	self := os.Getpid()
	return append([]int{self}, procmem.Children()[self]...)
}
