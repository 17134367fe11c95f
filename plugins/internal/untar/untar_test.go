package untar

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Files larger than flushEvery are written in pieces whose writeback
// starts as they are written: what lands on disk is the stream's bytes,
// whole, whatever the size against flushEvery.
func TestExtractFlushes(t *testing.T) {
	sizes := map[string]int{"big": 2*flushEvery + 12345, "edge": flushEvery, "small": 100, "empty": 0}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	want := map[string][]byte{}
	for name, size := range sizes {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7 + len(name))
		}
		want[name] = data
		if err := tw.WriteHeader(&tar.Header{Name: "d/" + name, Typeflag: tar.TypeReg, Size: int64(size), Mode: 0o600}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	if err := Extract(root, &b, nil); err != nil {
		t.Fatal(err)
	}
	if err := SyncTree(dir); err != nil {
		t.Fatal(err)
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(dir, "d", name))
		if err != nil || !bytes.Equal(got, data) {
			t.Errorf("%s: %d bytes (%v), want %d equal bytes", name, len(got), err, len(data))
		}
	}
}
