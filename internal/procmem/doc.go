// Package procmem reads the memory of processes as Linux's /proc tells it:
// which processes are whose children, a kB field of a process's status or
// smaps_rollup, and the reset of a process's high-water mark. `pipe bench`
// (package tune) reads its own peak and its plugin processes' with it, and
// the comparison harness (bench/) samples the RSS and PSS of a pipe process
// tree. Elsewhere than Linux every reading is unknown.
//
// It imports nothing of pipe: a leaf that any layer may use.
package procmem
