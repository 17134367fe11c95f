package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// environment is what the report's header says about the machine and the
// tools.
type environment struct {
	date      string
	cpu       string
	cpus      int
	memory    string
	kernel    string
	goVersion string
	zstd      string
	cp        string
	pipe      string
	fs        string // filesystem type of the work folder
	loadStart string
	loadEnd   string
}

func describeEnv(ctx context.Context, cfg config) environment {
	e := environment{
		date:      time.Now().UTC().Format("2006-01-02 15:04:05 MST"),
		cpu:       cpuModel(),
		cpus:      runtime.NumCPU(),
		memory:    memTotal(),
		kernel:    firstLine(output(ctx, "uname", "-srm")),
		goVersion: runtime.Version(),
		zstd:      firstLine(output(ctx, "zstd", "--version")),
		cp:        firstLine(output(ctx, "cp", "--version")),
		pipe:      firstLine(output(ctx, cfg.pipe, "--version")),
		loadStart: loadAvg(),
	}
	if err := os.MkdirAll(cfg.workDir, 0o755); err == nil {
		e.fs = firstLine(output(ctx, "findmnt", "-n", "-o", "FSTYPE,SOURCE", "-T", cfg.workDir))
	}
	return e
}

// output runs a command for its output; a failure is reported in place of
// the output, since the header is informational.
func output(ctx context.Context, name string, args ...string) string {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return "unavailable (" + err.Error() + ")"
	}
	return string(out)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(s)
}

// procField returns the value of the first "key: value" line of a /proc
// file whose key is key.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func cpuModel() string {
	if m := procField("/proc/cpuinfo", "model name"); m != "" {
		return m
	}
	return runtime.GOARCH
}

func memTotal() string {
	return procField("/proc/meminfo", "MemTotal")
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
