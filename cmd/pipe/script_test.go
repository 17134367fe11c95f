package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/pipebackup/pipe/wal/quickpush"
)

// TestMain lets the scripts run `pipe` and `pipe-wal` as commands: the
// test binary turns into either when called by its name.
func TestMain(m *testing.M) {
	maybeServePlugins() // the test binary is also the built-in plugin
	testscript.Main(m, map[string]func(){
		"pipe":     func() { os.Exit(execute(os.Stdout, os.Stderr, os.Args[1:])) },
		"pipe-wal": func() { os.Exit(quickpush.Main(os.Args[1:])) },
	})
}

// TestScripts runs the CLI scenarios under testdata/script, one per file.
func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("HOME", env.WorkDir)
			env.Setenv("REDIS_PLUGIN", redisPlugin(t))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"gendata":    cmdGendata,
			"filesize":   cmdFilesize,
			"flipbyte":   cmdFlipbyte,
			"truncate":   cmdTruncate,
			"nofile":     cmdNofile,
			"replace":    cmdReplace,
			"envfile":    cmdEnvfile,
			"waitfile":   cmdWaitfile,
			"noproc":     cmdNoproc,
			"killplugin": cmdKillplugin,
			"mark":       cmdMark,
			"within":     cmdWithin,
			"pgcluster":  cmdPgcluster,
			"walseg":     cmdWalseg,
			"receiver":   cmdReceiver,
		},
		Condition: func(cond string) (bool, error) {
			switch {
			case strings.HasPrefix(cond, "exec:"):
				_, err := exec.LookPath(strings.TrimPrefix(cond, "exec:"))
				if err != nil && os.Getenv("CI") != "" {
					return false, fmt.Errorf("%s is not installed; make test-deps installs it", strings.TrimPrefix(cond, "exec:"))
				}
				return err == nil, nil
			}
			return false, fmt.Errorf("unknown condition %q", cond)
		},
	})
}

var (
	redisPluginOnce sync.Once
	redisPluginPath string
)

// redisPlugin builds the example plugin once for all scripts.
func redisPlugin(t *testing.T) string {
	redisPluginOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pipe-script-plugins-")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "pipe-plugin-redis")
		out, err := exec.Command("go", "build", "-o", p, "../../examples/plugins/redis").CombinedOutput()
		if err != nil {
			t.Fatalf("building the example plugin: %v\n%s", err, out)
		}
		redisPluginPath = p
	})
	return redisPluginPath
}

// gendata PATH BYTES [SEED]: write deterministic mixed data (text that
// compresses, random bytes that do not).
func cmdGendata(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 {
		ts.Fatalf("usage: gendata PATH BYTES [SEED]")
	}
	n, err := strconv.Atoi(args[1])
	ts.Check(err)
	seed := uint64(1)
	if len(args) > 2 {
		s, _ := strconv.Atoi(args[2])
		seed = uint64(s)
	}
	p := ts.MkAbs(args[0])
	ts.Check(os.MkdirAll(filepath.Dir(p), 0o755))
	ts.Check(os.WriteFile(p, mixedData(seed, n), 0o644))
}

// mixedData returns n bytes alternating compressible text and noise.
func mixedData(seed uint64, n int) []byte {
	var b bytes.Buffer
	x := seed*2654435761 + 1
	next := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for b.Len() < n {
		if next()%3 == 0 {
			for i := 0; i < 512; i++ {
				b.WriteByte(byte(next()))
			}
		} else {
			fmt.Fprintf(&b, "%d\tcustomer-%d\tshipped order %d to warehouse %d\n", next()%100000, next()%5000, next()%900000, next()%40)
		}
	}
	return b.Bytes()[:n]
}

// filesize PATH N: the file has exactly N bytes.
func cmdFilesize(ts *testscript.TestScript, neg bool, args []string) {
	fi, err := os.Stat(ts.MkAbs(args[0]))
	ts.Check(err)
	want, _ := strconv.ParseInt(args[1], 10, 64)
	if (fi.Size() == want) == neg {
		ts.Fatalf("%s has %d bytes (want %s%d)", args[0], fi.Size(), map[bool]string{true: "not ", false: ""}[neg], want)
	}
}

// flipbyte PATH OFFSET: invert one byte (negative offsets count from the end).
func cmdFlipbyte(ts *testscript.TestScript, neg bool, args []string) {
	p := ts.MkAbs(args[0])
	b, err := os.ReadFile(p)
	ts.Check(err)
	off, _ := strconv.Atoi(args[1])
	if off < 0 {
		off += len(b)
	}
	b[off] ^= 0xff
	ts.Check(os.WriteFile(p, b, 0o600))
}

// truncate PATH N: cut the file to N bytes (negative: drop that many).
func cmdTruncate(ts *testscript.TestScript, neg bool, args []string) {
	p := ts.MkAbs(args[0])
	fi, err := os.Stat(p)
	ts.Check(err)
	n, _ := strconv.ParseInt(args[1], 10, 64)
	if n < 0 {
		n += fi.Size()
	}
	ts.Check(os.Truncate(p, n))
}

// nofile GLOB: no file matches (no temporary or partial file is left).
func cmdNofile(ts *testscript.TestScript, neg bool, args []string) {
	var found []string
	for _, g := range args {
		m, err := filepath.Glob(ts.MkAbs(g))
		ts.Check(err)
		found = append(found, m...)
	}
	if (len(found) == 0) == neg {
		ts.Fatalf("nofile %v: found %v", args, found)
	}
}

// replace PATH REGEXP TEXT: rewrite every match in the file with TEXT, as
// written (a hostile or damaged store, say).
func cmdReplace(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 3 {
		ts.Fatalf("usage: replace PATH REGEXP TEXT")
	}
	p := ts.MkAbs(args[0])
	b, err := os.ReadFile(p)
	ts.Check(err)
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	if !re.Match(b) {
		ts.Fatalf("replace: %s does not match in %s", args[1], args[0])
	}
	ts.Check(os.WriteFile(p, re.ReplaceAll(b, []byte(args[2])), 0o600))
}

// waitfile PATH: wait (up to a minute) until the file exists.
func cmdWaitfile(ts *testscript.TestScript, neg bool, args []string) {
	p := ts.MkAbs(args[0])
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(p); err == nil {
			return
		}
	}
	ts.Fatalf("waitfile: %s did not appear within a minute", args[0])
}

// procs returns the pids of the processes whose command line contains s.
func procs(s string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(b), "\x00", " "), s) {
			out = append(out, pid)
		}
	}
	return out
}

// noproc TEXT: within 10 seconds, no process's command line contains TEXT
// (the processes found are killed, so a failure leaves nothing behind).
func cmdNoproc(ts *testscript.TestScript, neg bool, args []string) {
	var left []int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = procs(args[0]); len(left) == 0 {
			return
		}
	}
	for _, pid := range left {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	ts.Fatalf("noproc: processes %v still run %q", left, args[0])
}

// killplugin: kill -9 the built-in plugin processes working in $WORK.
func cmdKillplugin(ts *testscript.TestScript, neg bool, args []string) {
	work := ts.Getenv("WORK")
	entries, _ := os.ReadDir("/proc")
	killed := 0
	for _, e := range entries {
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil || !strings.Contains(string(env), "\x00PIPE_PLUGIN_SERVE=builtin\x00") && !strings.HasPrefix(string(env), "PIPE_PLUGIN_SERVE=builtin\x00") {
			continue
		}
		if cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd")); err != nil || cwd != work {
			continue
		}
		pid, _ := strconv.Atoi(e.Name())
		ts.Check(syscall.Kill(pid, syscall.SIGKILL))
		killed++
	}
	if killed == 0 {
		ts.Fatalf("killplugin: no plugin process works in %s", work)
	}
}

// mark: remember now; within SECONDS: less than that has passed since.
// pgcluster DIR SYSID: a data directory as far as pipe wal reads one:
// global/pg_control with the system identifier, pg_wal/archive_status.
func cmdPgcluster(ts *testscript.TestScript, neg bool, args []string) {
	dir := ts.MkAbs(args[0])
	id, err := strconv.ParseUint(args[1], 10, 64)
	ts.Check(err)
	control := make([]byte, 8192)
	binary.LittleEndian.PutUint64(control, id)
	ts.Check(os.MkdirAll(filepath.Join(dir, "global"), 0o700))
	ts.Check(os.WriteFile(filepath.Join(dir, "global", "pg_control"), control, 0o600))
	ts.Check(os.MkdirAll(filepath.Join(dir, "pg_wal", "archive_status"), 0o700))
}

// walseg DIR NAME SYSID [SEED]: a 1 MiB WAL segment of the cluster in
// DIR/pg_wal, marked ready: its first page's long header, then data.
func cmdWalseg(ts *testscript.TestScript, neg bool, args []string) {
	dir := ts.MkAbs(args[0])
	name := args[1]
	id, err := strconv.ParseUint(args[2], 10, 64)
	ts.Check(err)
	tli, err := strconv.ParseUint(name[:8], 16, 32)
	ts.Check(err)
	seed := uint64(1)
	if len(args) > 3 {
		seed, _ = strconv.ParseUint(args[3], 10, 64)
	}
	const size = 1 << 20
	b := append(make([]byte, 0, size), mixedData(seed, size)...)
	binary.LittleEndian.PutUint16(b[0:], 0xD110)
	binary.LittleEndian.PutUint16(b[2:], 0x0002) // XLP_LONG_HEADER
	binary.LittleEndian.PutUint32(b[4:], uint32(tli))
	binary.LittleEndian.PutUint64(b[24:], id)
	binary.LittleEndian.PutUint32(b[32:], size)
	binary.LittleEndian.PutUint32(b[36:], 8192)
	ts.Check(os.WriteFile(filepath.Join(dir, "pg_wal", name), b, 0o600))
	ts.Check(os.WriteFile(filepath.Join(dir, "pg_wal", "archive_status", name+".ready"), nil, 0o600))
}

func cmdMark(ts *testscript.TestScript, neg bool, args []string) {
	ts.Setenv("MARK", strconv.FormatInt(time.Now().UnixNano(), 10))
}

func cmdWithin(ts *testscript.TestScript, neg bool, args []string) {
	start, err := strconv.ParseInt(ts.Getenv("MARK"), 10, 64)
	ts.Check(err)
	limit, err := time.ParseDuration(args[0])
	ts.Check(err)
	if took := time.Since(time.Unix(0, start)); took >= limit {
		ts.Fatalf("within: %v passed since mark, want less than %v", took.Round(time.Millisecond), limit)
	}
}

// envfile NAME PATH: set the variable NAME to the file's first line (a run
// id a command printed, say).
func cmdEnvfile(ts *testscript.TestScript, neg bool, args []string) {
	b, err := os.ReadFile(ts.MkAbs(args[1]))
	ts.Check(err)
	line, _, _ := strings.Cut(string(b), "\n")
	ts.Setenv(args[0], strings.TrimSpace(line))
}
