package fs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

var ctx = context.Background()

func newSink(t *testing.T, untar bool) *Sink {
	s, d := SinkType{}.Configure(ctx, sdk.NewConfig(map[string]any{"untar": untar}))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s.(*Sink)
}

func newSource(t *testing.T, path string, tar bool) *Source {
	s, d := SourceType{}.Configure(ctx, sdk.NewConfig(map[string]any{"path": path, "tar": tar}))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s.(*Source)
}

func entries(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func TestSinkCommitAndAbort(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, false)
	final := filepath.Join(dir, "sub", "a.zst")
	w, err := s.Create(ctx, sdk.Object{Key: final, Size: 11})
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, "hello ")
	io.WriteString(w, "world")
	if _, err := os.Stat(final); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the final path exists before Commit")
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(final); string(b) != "hello world" {
		t.Fatalf("got %q", b)
	}
	if fi, _ := os.Stat(final); fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v: backups must not be world-readable", fi.Mode())
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}

	w, _ = s.Create(ctx, sdk.Object{Key: filepath.Join(dir, "sub", "b.zst"), Size: -1})
	io.WriteString(w, "partial")
	if err := w.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if got := entries(t, dir); strings.Join(got, ",") != "sub,sub/a.zst" {
		t.Fatalf("left behind: %v", got)
	}
	if err := s.Remove(ctx, final); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, final); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
}

// Preallocation reserves the blocks without changing the file's length.
func TestPreallocate(t *testing.T) {
	dir := t.TempDir()
	w, err := newSink(t, false).Create(ctx, sdk.Object{Key: filepath.Join(dir, "f"), Size: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	fw := w.(*fileWriter)
	fi, _ := fw.f.Stat()
	if fi.Size() != 0 {
		t.Fatalf("size %d after preallocation", fi.Size())
	}
	if blocks := fi.Sys().(*syscallStat).Blocks * 512; blocks < 8<<20 {
		t.Skipf("this filesystem did not preallocate (%d bytes allocated)", blocks)
	}
	w.Abort(ctx)
}

func TestFileSizeLimit(t *testing.T) {
	// A child test process writes under `ulimit -f`; the write fails with
	// EFBIG and nothing is left behind.
	if os.Getenv("PIPE_FS_CHILD") != "" {
		dir := os.Getenv("PIPE_FS_CHILD")
		w, err := newSink(t, false).Create(ctx, sdk.Object{Key: filepath.Join(dir, "big"), Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.Write(make([]byte, 1<<20))
		if err == nil {
			t.Fatal("no error")
		}
		w.Abort(ctx)
		os.Stdout.WriteString("ERR:" + err.Error())
		return
	}
	dir := t.TempDir()
	cmd := exec.Command("sh", "-c", "ulimit -f 100 && exec \"$0\" -test.run '^TestFileSizeLimit$'", os.Args[0])
	cmd.Env = append(os.Environ(), "PIPE_FS_CHILD="+dir)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), "ERR:writing "+filepath.Join(dir, "big")+": write") || !strings.Contains(string(out), "file size limit") {
		t.Fatalf("child said: %s", out)
	}
	if got := entries(t, dir); len(got) != 0 {
		t.Fatalf("left behind: %v", got)
	}
}

func TestSourceFilesAndTar(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "data")
	os.MkdirAll(filepath.Join(src, "a", "b"), 0o755)
	os.WriteFile(filepath.Join(src, "top.txt"), []byte("top"), 0o644)
	os.WriteFile(filepath.Join(src, "a", "b", "deep.bin"), bytes.Repeat([]byte{7}, 70000), 0o640)
	os.Symlink("top.txt", filepath.Join(src, "link"))

	s := newSource(t, src, false)
	infos, err := s.Streams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 2 || infos[0].Name != "a/b/deep.bin" || infos[0].Size != 70000 || infos[1].Name != "top.txt" {
		t.Fatalf("streams %+v", infos)
	}
	if _, err := s.Open(ctx, "../etc/passwd"); err == nil {
		t.Fatal("opened a path outside the folder")
	}
	if _, err := s.Open(ctx, "nope"); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("err = %v, want ErrNotFound", err)
	}

	// The folder as one tar stream, extracted by the sink with untar.
	ts := newSource(t, src, true)
	infos, _ = ts.Streams(ctx)
	if len(infos) != 1 || infos[0].Name != "data.tar" {
		t.Fatalf("tar streams %+v", infos)
	}
	r, err := ts.Open(ctx, "data.tar")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "restored")
	w, err := newSink(t, true).Create(ctx, sdk.Object{Key: out, Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(w, r); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(entries(t, out), ","); got != "a,a/b,a/b/deep.bin,link,top.txt" {
		t.Fatalf("extracted %s", got)
	}
	if l, _ := os.Readlink(filepath.Join(out, "link")); l != "top.txt" {
		t.Fatalf("symlink → %q", l)
	}
	if fi, _ := os.Stat(filepath.Join(out, "a", "b", "deep.bin")); fi.Mode().Perm() != 0o640 || fi.Size() != 70000 {
		t.Fatalf("deep.bin %v %d", fi.Mode(), fi.Size())
	}
}

func TestUntarRejectsEscapes(t *testing.T) {
	dir := t.TempDir()
	for name, archive := range map[string]func(*tarBuilder){
		"dotdot":  func(b *tarBuilder) { b.file("../evil", "x") },
		"symlink": func(b *tarBuilder) { b.symlink("up", ".."); b.file("up/evil", "x") },
		"garbage": nil,
	} {
		t.Run(name, func(t *testing.T) {
			var in []byte
			if archive == nil {
				in = []byte("definitely not a tar file, but long enough to be read as a header block...")
				in = append(in, make([]byte, 600)...)
			} else {
				b := newTarBuilder()
				archive(b)
				in = b.bytes()
			}
			out := filepath.Join(dir, name)
			w, err := newSink(t, true).Create(ctx, sdk.Object{Key: out, Size: -1})
			if err != nil {
				t.Fatal(err)
			}
			w.Write(in)
			if err := w.Commit(ctx); err == nil {
				t.Fatal("committed a hostile archive")
			}
			if got := entries(t, dir); len(got) != 0 {
				t.Fatalf("left behind: %v", got)
			}
		})
	}
}

func TestConfigureErrors(t *testing.T) {
	_, d := SourceType{}.Configure(ctx, sdk.NewConfig(map[string]any{"path": "/no/such/dir"}))
	if !d.HasErrors() || d[0].Attribute != "path" || !strings.Contains(d[0].Detail, "check the path") {
		t.Fatalf("diags %+v", d)
	}
	f := filepath.Join(t.TempDir(), "f")
	os.WriteFile(f, nil, 0o600)
	_, d = SourceType{}.Configure(ctx, sdk.NewConfig(map[string]any{"path": f, "tar": true}))
	if !d.HasErrors() || d[0].Attribute != "tar" {
		t.Fatalf("diags %+v", d)
	}
}

func TestSinkStorage(t *testing.T) {
	dir := t.TempDir()
	s := newSink(t, false)
	for _, k := range []string{"run1/a.zst", "run1/b/c.zst", "run2/a.zst", "other.txt"} {
		w, err := s.Create(ctx, sdk.Object{Key: filepath.Join(dir, k), Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, k)
		if err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	list, err := s.List(ctx, filepath.Join(dir, "run1")+"/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != filepath.Join(dir, "run1/a.zst") || list[0].Size != 10 || list[0].Modified.IsZero() {
		t.Fatalf("list %+v", list)
	}
	if all, _ := s.List(ctx, filepath.Join(dir, "run")); len(all) != 3 {
		t.Fatalf("prefix run: %d objects", len(all))
	}
	if none, err := s.List(ctx, filepath.Join(dir, "nothing/")); err != nil || len(none) != 0 {
		t.Fatalf("missing folder: %v %v", none, err)
	}
	rc, err := s.Open(ctx, filepath.Join(dir, "run2/a.zst"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "run2/a.zst" {
		t.Fatalf("read %q", b)
	}
	if _, err := s.Open(ctx, filepath.Join(dir, "gone")); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("err = %v", err)
	}
}

// A ranged read of a stored file (a deduplicated restore's chunk in its
// pack) seeks to its start: it reads the range, not the file up to it.
func TestSourceRangedReadSeeks(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 16<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(dir, "r-00001.pack"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	read := func() int64 { // bytes this process has read by read(2)
		b, err := os.ReadFile("/proc/self/io")
		if err != nil {
			t.Skipf("no /proc/self/io to count reads: %v", err)
		}
		var n int64
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "rchar: "); ok {
				n, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		return n
	}
	s := newSource(t, dir, false)
	before := read()
	rc, err := sdk.OpenRange(ctx, s, "r-00001.pack", 12<<20, 100)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data[12<<20:12<<20+100]) {
		t.Fatal("the range read other bytes than the file's there")
	}
	if n := read() - before; n > 1<<20 {
		t.Fatalf("reading 100 bytes at 12 MiB read %d bytes: the source reads up to the range instead of seeking", n)
	}
}
