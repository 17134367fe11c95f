package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pipeCLI runs the CLI in-process in the working directory.
func pipeCLI(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := execute(&out, &errb, args); code != 0 {
		t.Fatalf("pipe %s: exit %d\n%s", strings.Join(args, " "), code, errb.String())
	}
	return out.String() + errb.String()
}

// exampleRecipes says how each file under examples/ is exercised. Every
// example must have one: an example nobody runs rots.
var exampleRecipes = map[string]func(t *testing.T, repo string){
	"redis-backup.hcl": redisRecipe,
	"quickstart.hcl": func(t *testing.T, repo string) {
		work := t.TempDir()
		gen := exec.Command("go", "run", "./examples/sampledata", "-out", filepath.Join(work, "examples", "data"), "-mb", "6")
		gen.Dir = repo
		if out, err := gen.CombinedOutput(); err != nil {
			t.Fatalf("sampledata: %v\n%s", err, out)
		}
		os.MkdirAll(filepath.Join(work, "examples"), 0o755)
		src, _ := os.ReadFile(filepath.Join(repo, "examples", "quickstart.hcl"))
		os.WriteFile(filepath.Join(work, "examples", "quickstart.hcl"), src, 0o644)
		t.Chdir(work)
		pipeCLI(t, "keygen", "--if-missing")
		pipeCLI(t, "validate", "examples/quickstart.hcl")
		pipeCLI(t, "run", "examples/quickstart.hcl", "--pipeline", "backup", "--progress", "never")
		pipeCLI(t, "run", "examples/quickstart.hcl", "--pipeline", "restore", "--progress", "never")
		if out, err := exec.Command("diff", "-r", "examples/data", "out/restored").CombinedOutput(); err != nil {
			t.Fatalf("restored data differs: %v\n%s", err, out)
		}
	},
}

func TestExamples(t *testing.T) {
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(repo, "examples", "*.hcl"))
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			recipe, ok := exampleRecipes[name]
			if !ok {
				t.Fatalf("examples/%s has no recipe in TestExamples: add one that runs it", name)
			}
			recipe(t, repo)
		})
	}
}

// needTool returns a tool's path; in CI a missing tool fails the test
// (make test-deps installs it), elsewhere it skips.
func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed; make test-deps installs it", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// redisServer starts a redis-server on a free loopback port and returns
// its address; it stops with the test.
func redisServer(t *testing.T, dir string, args ...string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(needTool(t, "redis-server"), append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0"}, args...)...)
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if i == 100 {
			t.Fatalf("redis-server did not start:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func redisCLI(t *testing.T, addr, password, input string, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(needTool(t, "redis-cli"), append([]string{"-h", host, "-p", port, "--no-auth-warning"}, args...)...)
	if password != "" {
		cmd.Env = append(os.Environ(), "REDISCLI_AUTH="+password)
	}
	cmd.Stdin = strings.NewReader(input)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// redisRecipe builds the example plugin, backs up a real Redis server with
// it, restores the snapshot and loads it into a second server.
func redisRecipe(t *testing.T, repo string) {
	needTool(t, "redis-cli")
	work := t.TempDir()
	plugins := filepath.Join(work, "plugins")
	build := exec.Command("go", "build", "-o", filepath.Join(plugins, "pipe-plugin-redis"), "./examples/plugins/redis")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the plugin: %v\n%s", err, out)
	}
	const password = "redis-example-secret-42"
	addr := redisServer(t, t.TempDir(), "--requirepass", password)
	var cmds strings.Builder
	for i := 0; i < 1000; i++ {
		fmt.Fprintf(&cmds, "SET user:%d name-%d\n", i, i*7)
	}
	redisCLI(t, addr, password, cmds.String())

	src, _ := os.ReadFile(filepath.Join(repo, "examples", "redis-backup.hcl"))
	os.WriteFile(filepath.Join(work, "redis-backup.hcl"), src, 0o644)
	t.Chdir(work)
	t.Setenv("PIPE_PLUGIN_PATH", plugins)
	t.Setenv("PIPE_VAR_redis_password", password)
	out := pipeCLI(t, "plugins")
	if !strings.Contains(out, "redis 0.1.0") {
		t.Fatalf("pipe plugins does not list the plugin:\n%s", out)
	}
	out += pipeCLI(t, "run", "redis-backup.hcl", "--var", "redis_addr="+addr, "--progress", "never")
	if strings.Contains(out, password) {
		t.Fatalf("the password appears in pipe's output:\n%s", out)
	}
	manifests, _ := filepath.Glob("backups/redis/*/pipe-manifest.json")
	if len(manifests) != 1 {
		t.Fatalf("manifests: %v", manifests)
	}
	if m, _ := os.ReadFile(manifests[0]); bytes.Contains(m, []byte(password)) {
		t.Fatal("the password appears in the manifest")
	}
	// The restored snapshot loads into a fresh server with every key.
	restored := filepath.Join(work, "backups", "redis-restored")
	addr2 := redisServer(t, restored, "--dbfilename", "dump.rdb")
	if n := redisCLI(t, addr2, "", "", "DBSIZE"); n != "1000" {
		t.Fatalf("the restored server has %s keys, want 1000", n)
	}
	if v := redisCLI(t, addr2, "", "", "GET", "user:123"); v != "name-861" {
		t.Fatalf("user:123 = %q", v)
	}
}
