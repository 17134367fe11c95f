package host

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pipebackup/pipe/internal/direct"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// pluginDir holds the bad plugin under every name it answers to.
var pluginDir string

func TestMain(m *testing.M) {
	if dir := os.Getenv("PIPE_TEST_HOST_HELPER"); dir != "" {
		hostHelper(dir)
		return
	}
	dir, err := os.MkdirTemp("", "pipe-badplugin-")
	if err != nil {
		panic(err)
	}
	bin := filepath.Join(dir, "badplugin")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/badplugin").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the test plugin: %v\n%s", err, out)
		os.Exit(1)
	}
	for _, role := range []string{"good", "crash", "hang", "exit", "garbage", "future", "slow"} {
		if err := os.Symlink(bin, filepath.Join(dir, Prefix+role)); err != nil {
			panic(err)
		}
	}
	pluginDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// hostHelper starts the good plugin, prints its pid, and waits to be killed.
func hostHelper(dir string) {
	r, _ := New(Options{Dirs: []string{dir}})
	if _, found, err := r.Schema("source", "good"); !found || err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	fmt.Println(r.plugins["good"].proc.started.Process.Pid)
	select {}
}

// createObject configures role's sink with a fresh dir and creates an
// object of unknown size under key with ctx.
func createObject(t *testing.T, ctx context.Context, r *Registry, role string, key string) sdk.ObjectWriter {
	t.Helper()
	kt, _ := r.Sink(role)
	snk, diags := kt.Configure(context.Background(), sdk.NewConfig(map[string]any{"dir": t.TempDir()}))
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	w, err := snk.Create(ctx, sdk.Object{Key: key, Stream: "s", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func registry(t *testing.T) *Registry {
	t.Helper()
	r, err := New(Options{Dirs: []string{pluginDir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// within fails the test if f takes longer than d.
func within(t *testing.T, d time.Duration, f func()) {
	t.Helper()
	start := time.Now()
	f()
	if took := time.Since(start); took > d {
		t.Fatalf("took %s, more than %s", took.Round(time.Millisecond), d)
	}
}

func TestPluginWorks(t *testing.T) {
	StartTimeout = 2 * time.Second // Plugins() starts the hanging one too
	defer func() { StartTimeout = 10 * time.Second }()
	r := registry(t)
	st, err := r.Source("good")
	if err != nil || st == nil {
		t.Fatalf("source good: %v", err)
	}
	src, diags := st.Configure(context.Background(), sdk.NewConfig(map[string]any{"size": int64(5 << 20)}))
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	rc, err := src.Open(context.Background(), "data")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	if err != nil || n != 5<<20 || rc.Close() != nil {
		t.Fatalf("read %d bytes: %v", n, err)
	}
	if _, err := src.Open(context.Background(), "nope"); !isNotFound(err) {
		t.Fatalf("opening a missing stream: %v, want sdk.ErrNotFound", err)
	}
	// Diagnostics from Configure cross the boundary with their attribute.
	_, diags = st.Configure(context.Background(), sdk.NewConfig(map[string]any{"token": "reject"}))
	if !diags.HasErrors() || diags[0].Attribute != "token" || diags[0].Summary != "token refused" {
		t.Fatalf("diagnostics %+v", diags)
	}
	infos := r.Plugins()
	var good *PluginInfo
	for i := range infos {
		if infos[i].Name == "good" {
			good = &infos[i]
		}
	}
	if good == nil || good.Version != "9.9.9" || len(good.Sources) != 1 || good.SHA256 == "" {
		t.Fatalf("plugins: %+v", infos)
	}
}

func isNotFound(err error) bool {
	return err != nil && strings.Contains(err.Error(), "not found") && errors.Is(err, sdk.ErrNotFound)
}

// A Commit that fails in the plugin is followed by Abort there: what the
// store kept although the commit reported an error does not stay behind.
func TestFailedCommitAborts(t *testing.T) {
	r := registry(t)
	st, err := r.Sink("good")
	if err != nil || st == nil {
		t.Fatalf("sink good: %v", err)
	}
	dir := t.TempDir()
	snk, diags := st.Configure(context.Background(), sdk.NewConfig(map[string]any{"dir": dir}))
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	for _, key := range []string{"kept", "lost-one"} {
		w, err := snk.Create(context.Background(), sdk.Object{Key: key, Stream: key, Size: 5, MaxSize: -1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte("hello")); err != nil {
			t.Fatal(err)
		}
		err = w.Commit(context.Background())
		_, statErr := os.Stat(filepath.Join(dir, key))
		switch key {
		case "kept":
			if err != nil || statErr != nil {
				t.Fatalf("commit %s: %v; stat: %v", key, err, statErr)
			}
		default:
			if err == nil || !strings.Contains(err.Error(), "the answer to the commit got lost") {
				t.Fatalf("commit %s: %v, want the plugin's error", key, err)
			}
			if !errors.Is(statErr, os.ErrNotExist) {
				t.Fatalf("%s is still there after a failed commit (stat: %v)", key, statErr)
			}
		}
		if err := w.Abort(context.Background()); err != nil {
			t.Fatalf("abort after commit: %v", err)
		}
	}
}

// Errors of a stream or object that crosses the boundary through a pipe
// (no file of its own) arrive as the plugin's: a stream that breaks off
// fails instead of ending short, and a write the plugin refuses says why.
func TestPipedErrors(t *testing.T) {
	r := registry(t)
	st, _ := r.Source("good")
	src, diags := st.Configure(context.Background(), sdk.NewConfig(map[string]any{"size": int64(9 << 20)}))
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	rc, err := src.Open(context.Background(), "broken")
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	if err == nil {
		err = rc.Close()
	} else {
		rc.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "the connection broke off") || n != 3<<20 {
		t.Fatalf("a stream that broke off after %d bytes: %v", n, err)
	}

	w := createObject(t, context.Background(), r, "good", "refuse-me")
	err = nil
	chunk := make([]byte, 1<<20)
	for i := 0; i < 64 && err == nil; i++ {
		_, err = w.Write(chunk)
	}
	if err == nil {
		err = w.Commit(context.Background())
	}
	w.Abort(context.Background())
	if err == nil || !strings.Contains(err.Error(), "the store refused the part") {
		t.Fatalf("a refused write: %v", err)
	}
}

func TestPluginFailures(t *testing.T) {
	StartTimeout = 2 * time.Second
	defer func() { StartTimeout = 10 * time.Second }()
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"hang", []string{"plugin hang", "failed to start", "did not answer within 2s"}},
		{"exit", []string{"plugin exit", "exited at start (exit status 3)", "missing configuration file /etc/bad.conf"}},
		{"garbage", []string{"plugin garbage", "printed something other than the plugin handshake", "Welcome to badplugin"}},
		{"future", []string{"plugin future", "another protocol version than this pipe (protocol 1)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := registry(t)
			within(t, 5*time.Second, func() {
				_, found, err := r.Schema("source", tc.name)
				if found || err == nil {
					t.Fatalf("found=%v err=%v", found, err)
				}
				for _, w := range tc.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			})
		})
	}
	t.Run("missing", func(t *testing.T) {
		_, found, err := registry(t).Schema("sink", "nowhere")
		if found || err != nil {
			t.Fatalf("found=%v err=%v; a missing plugin is an unknown type", found, err)
		}
	})
}

// A plugin that dies mid-stream fails the read at once, naming it and what
// it printed.
func TestPluginCrashMidStream(t *testing.T) {
	r := registry(t)
	st, _ := r.Source("crash")
	src, diags := st.Configure(context.Background(), sdk.NewConfig(map[string]any{"size": int64(30 << 20)}))
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	rc, err := src.Open(context.Background(), "data")
	if err != nil {
		t.Fatal(err)
	}
	within(t, 5*time.Second, func() {
		_, err = io.Copy(io.Discard, rc)
	})
	if err == nil || !strings.Contains(err.Error(), "plugin crash exited unexpectedly (exit status 2)") || !strings.Contains(err.Error(), "panic: boom") {
		t.Fatalf("err = %v", err)
	}
}

func TestPinnedChecksum(t *testing.T) {
	b, _ := os.ReadFile(filepath.Join(pluginDir, "badplugin"))
	sum := sha256.Sum256(b)
	good := hex.EncodeToString(sum[:])

	r := registry(t)
	if err := r.Pin("good", "", good); err != nil {
		t.Fatal(err)
	}
	if _, found, err := r.Schema("source", "good"); !found || err != nil {
		t.Fatalf("pinned with the right checksum: %v", err)
	}

	r = registry(t)
	wrong := strings.Repeat("0", 64)
	if err := r.Pin("good", "", wrong); err != nil {
		t.Fatal(err)
	}
	_, _, err := r.Schema("source", "good")
	if err == nil || !strings.Contains(err.Error(), "refusing to start it") || !strings.Contains(err.Error(), good) {
		t.Fatalf("err = %v", err)
	}
	if err := registry(t).Pin("fs", "", ""); err != nil {
		t.Fatalf("pinning a name no built-in uses: %v", err)
	}
	if err := registry(t).Pin("good", "", "abc"); err == nil || !strings.Contains(err.Error(), "64 hex digits") {
		t.Fatalf("short checksum: %v", err)
	}
}

// A slow sink plugin holds the writer back: the bytes in flight between
// the processes stay bounded (by the pipe the object goes through, or by
// gRPC's flow-control windows where descriptors cannot be passed).
func TestBackpressureAcrossProcesses(t *testing.T) {
	r := registry(t)
	ctx, cancel := context.WithCancel(context.Background())
	w := createObject(t, ctx, r, "slow", "k")
	sent := make(chan int64, 1)
	go func() {
		var n int64
		chunk := make([]byte, 1<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				break
			}
			n += int64(len(chunk))
			select {
			case sent <- n:
			default:
				<-sent
				sent <- n
			}
		}
	}()
	time.Sleep(2 * time.Second)
	n := <-sent
	cancel()
	// The plugin takes 1 MiB per 50 ms: 40 MiB in 2 s. Without
	// backpressure the host would have pushed hundreds.
	if limit := int64(40<<20) + 3*(8<<20); n > limit {
		t.Fatalf("the host sent %d MiB to a sink that took ~40 MiB in 2 s", n>>20)
	}
}

// Abort stops an object whose Write is held back by a plugin whose upload
// hangs, with the run's context still live (sdk.ObjectWriter: "Abort may
// be called while a Write is blocked"), and the Write returns.
func TestAbortWhileWriting(t *testing.T) {
	r := registry(t)
	w := createObject(t, context.Background(), r, "slow", "stuck-k")
	wrote := make(chan error, 1)
	go func() {
		chunk := make([]byte, 4<<20)
		for {
			if _, err := w.Write(chunk); err != nil {
				wrote <- err
				return
			}
		}
	}()
	// The plugin takes 1 MiB, then nothing: the writer waits for room.
	time.Sleep(500 * time.Millisecond)
	aborted := make(chan error, 1)
	go func() { aborted <- w.Abort(context.Background()) }()
	select {
	case <-aborted:
	case <-time.After(5 * time.Second):
		t.Fatal("Abort of an object whose Write is stuck did not return")
	}
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("the Write held back by the plugin did not end with Abort")
	}
}

// Plugin processes do not outlive pipe, even when pipe is killed.
func TestPluginDiesWithHost(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "PIPE_TEST_HOST_HELPER="+pluginDir)
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("helper said %q", line)
	}
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the plugin is not running")
	}
	cmd.Process.Kill()
	cmd.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("plugin %d still runs after its host was killed", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A plugin's source writes a stream into a file pipe hands it (FillFile):
// at offsets when the stream can, in order otherwise, with progress; its
// failures and its death end the fill with what went wrong.
func TestFill(t *testing.T) {
	r := registry(t)
	var prefix atomic.Int64 // the last fill's, as the plugin told it
	fill := func(role, name string, size int64) (*os.File, int64, int64, error) {
		t.Helper()
		st, err := r.Source(role)
		if err != nil {
			t.Fatal(err)
		}
		src, diags := st.Configure(context.Background(), sdk.NewConfig(map[string]any{"size": size}))
		if diags.HasErrors() {
			t.Fatal(diags.Err())
		}
		f, err := os.Create(filepath.Join(t.TempDir(), "out"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		var progress atomic.Int64
		prefix.Store(0)
		n, err := src.(direct.Filler).Fill(context.Background(), name, f, func(k int64) { progress.Add(k) }, func(p int64) {
			if p <= prefix.Load() {
				t.Errorf("prefix told %d after %d", p, prefix.Load())
			}
			prefix.Store(p)
		})
		return f, n, progress.Load(), err
	}

	const size = 5<<20 + 123
	f, n, progress, err := fill("good", "ranges", size)
	if err != nil || n != size || progress != size || prefix.Load() != size {
		t.Fatalf("ranges: %d bytes, progress %d, prefix %d, %v", n, progress, prefix.Load(), err)
	}
	got, _ := os.ReadFile(f.Name())
	for o, b := range got {
		if b != byte(o%251) {
			t.Fatalf("byte %d is %d, want %d", o, b, o%251)
		}
	}
	if len(got) != size {
		t.Fatalf("the file has %d bytes", len(got))
	}

	// A stream without WriteAtTo is written in order.
	f, n, progress, err = fill("good", "data", size)
	if fi, _ := f.Stat(); err != nil || n != size || fi.Size() != size || progress != size || prefix.Load() != size {
		t.Fatalf("data: %d bytes, progress %d, prefix %d, %v", n, progress, prefix.Load(), err)
	}

	if _, _, _, err := fill("good", "nope", size); !isNotFound(err) {
		t.Fatalf("a missing stream: %v, want sdk.ErrNotFound", err)
	}
	if _, _, _, err := fill("good", "broken", size); err == nil || !strings.Contains(err.Error(), "the connection broke off") {
		t.Fatalf("a stream that broke off: %v", err)
	}
	within(t, 5*time.Second, func() { _, _, _, err = fill("crash", "ranges", size) })
	if err == nil || !strings.Contains(err.Error(), "plugin crash exited unexpectedly") {
		t.Fatalf("a plugin that died: %v", err)
	}
}

// An object through a plugin takes its bytes from a file pipe hands over
// (SendFile) when its writer can (sdk.ReaderAtFrom); one that cannot is
// untouched and is written through its pipe as always.
func TestSendFile(t *testing.T) {
	r := registry(t)
	st, err := r.Sink("good")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	snk, diags := st.Configure(context.Background(), sdk.NewConfig(map[string]any{"dir": dir}))
	if diags.HasErrors() {
		t.Fatal(diags.Err())
	}
	data := make([]byte, 3<<20+77)
	for i := range data {
		data[i] = byte(i % 253)
	}
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"at-taken", "written"} {
		w, err := snk.Create(context.Background(), sdk.Object{Key: key, Stream: key, Size: int64(len(data)), MaxSize: -1})
		if err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		var progress atomic.Int64
		n, taken, err := direct.SendFile(w, f, int64(len(data)), func(k int64) { progress.Add(k) })
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if want := key == "at-taken"; taken != want {
			t.Fatalf("%s: taken %v", key, taken)
		}
		if taken && (n != int64(len(data)) || progress.Load() != n) {
			t.Fatalf("%s: sent %d, progress %d", key, n, progress.Load())
		}
		if !taken {
			// Untouched: the pipe still carries the object.
			if _, err := w.Write(data); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, key)); !bytes.Equal(got, data) {
			t.Fatalf("%s: stored %d bytes, want %d", key, len(got), len(data))
		}
	}
}
