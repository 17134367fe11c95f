package untar

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzExtract feeds the untar extractor what a hostile stream could hold.
// It must never panic and never write outside its folder: whatever it
// does, the folder beside it stays as it was.
func FuzzExtract(f *testing.F) {
	add := func(entries ...*tar.Header) {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range entries {
			tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		tw.Close()
		f.Add(b.Bytes())
	}
	add(&tar.Header{Name: "a", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}, &tar.Header{Name: "b", Typeflag: tar.TypeLink, Linkname: "a"})
	add(&tar.Header{Name: "../escape", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	add(&tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../../outside"}, &tar.Header{Name: "l/x", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	add(&tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../outside/file"})
	add(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "d/f", Typeflag: tar.TypeReg, Size: 2, Mode: 0o600})
	// Memory-backed when the machine has it: the fuzzer makes and removes
	// folders by the thousand.
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir, err := os.MkdirTemp(base, "pipe-fuzz-extract-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		beside := filepath.Join(dir, "beside")
		if err := os.Mkdir(beside, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(beside, "file"), []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		target := filepath.Join(dir, "target")
		if err := os.Mkdir(target, 0o700); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(target)
		if err != nil {
			t.Fatal(err)
		}
		_ = Extract(root, bytes.NewReader(data), nil)
		root.Close()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 {
			t.Fatalf("the extractor wrote beside its folder: %v", entries)
		}
		inside, err := os.ReadDir(beside)
		if err != nil || len(inside) != 1 {
			t.Fatalf("the folder beside changed: %v %v", inside, err)
		}
		if b, err := os.ReadFile(filepath.Join(beside, "file")); err != nil || string(b) != "keep" {
			t.Fatalf("a file beside changed: %q %v", b, err)
		}
	})
}
