// Package procmem reads processes as Linux's /proc tells it: which
// processes are whose children (and a whole tree of them), what a
// process's stat line says (its parent, name, CPU time, RSS and start),
// its executable, command line and owner, a kB field of its status or
// smaps_rollup, and the reset of its high-water mark. `pipe bench`
// (package tune) reads its own peak and its plugin processes' with it;
// the comparison harness (bench/) samples the RSS and PSS of a pipe
// process tree with it, and tells the processes of a run apart (whose
// CPU and memory is whose) by it. Elsewhere than Linux every reading is
// unknown.
//
// It reads processes, not the machine: the harness's machine-wide
// counters (/proc/stat, /proc/diskstats) stay in the harness.
//
// It imports nothing of pipe: a leaf that any layer may use.
package procmem
