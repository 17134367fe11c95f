package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain lets the scripts run `pipe` as a command: the test binary turns
// into pipe when called by that name.
func TestMain(m *testing.M) {
	maybeServePlugins() // the test binary is also the built-in plugin
	testscript.Main(m, map[string]func(){
		"pipe": func() { os.Exit(execute(os.Stdout, os.Stderr, os.Args[1:])) },
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
			"gendata":  cmdGendata,
			"filesize": cmdFilesize,
			"flipbyte": cmdFlipbyte,
			"truncate": cmdTruncate,
			"nofile":   cmdNofile,
			"replace":  cmdReplace,
		},
		Condition: func(cond string) (bool, error) {
			switch {
			case strings.HasPrefix(cond, "exec:"):
				_, err := exec.LookPath(strings.TrimPrefix(cond, "exec:"))
				if err != nil && os.Getenv("CI") != "" {
					return false, fmt.Errorf("%s is not installed; .ci/run must install it", strings.TrimPrefix(cond, "exec:"))
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
