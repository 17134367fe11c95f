package runner_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
)

// run loads src, plans it and runs the named pipeline.
func run(t *testing.T, src, pipeline string) *runner.Report {
	t.Helper()
	reg, err := host.NewRegistry(all.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	runID := fmt.Sprintf("run-%d", time.Now().UnixNano())
	f, diags := pipefile.LoadSource("test.hcl", []byte(src), pipefile.Options{RunID: runID, Schemas: reg})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	pl, diags := plan.New(f, plan.Options{Host: profiles.Host{CPUs: 2, Memory: 8 << 30}})
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	for _, p := range pl.Pipelines {
		if p.Name != pipeline {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel() //nolint:revive // the loop returns in this iteration
		rep, err := runner.Run(ctx, p, runner.Options{RunID: runID, Registry: reg})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	t.Fatalf("no pipeline %q", pipeline)
	return nil
}

// keys writes a fresh age key pair and returns the paths.
func keys(t *testing.T, dir string) (pub, key string) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	pub, key = filepath.Join(dir, "k.pub"), filepath.Join(dir, "k.key")
	os.WriteFile(pub, []byte(id.Recipient().String()+"\n"), 0o644)
	os.WriteFile(key, []byte(id.String()+"\n"), 0o600)
	return pub, key
}

func backupRestore(pub, key, in, st, out string, extra string) string {
	return fmt.Sprintf(`
pipeline "backup" {
  %[6]s
  source "fs" { path = %[3]q }
  compress { workers = 2 }
  encrypt { recipients = [file(%[1]q)] }
  checksum {}
  sink "fs" { path = "%[4]s/${run.id}/" }
}
pipeline "restore" {
  %[6]s
  source "fs" { path = "%[4]s/" }
  decrypt { identities = [file(%[2]q)] }
  decompress { workers = 2 }
  sink "fs" { path = "%[5]s/" }
}`, pub, key, in, st, out, extra)
}

// digestTree maps every file under dir to its SHA-256.
func digestTree(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		var sum [32]byte
		copy(sum[:], h.Sum(nil))
		out[rel] = sum
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, a, b string) {
	t.Helper()
	x, y := digestTree(t, a), digestTree(t, b)
	if len(x) != len(y) {
		t.Fatalf("%s has %d files, %s has %d", a, len(x), b, len(y))
	}
	for k, v := range x {
		if y[k] != v {
			t.Fatalf("%s differs", k)
		}
	}
}

// writeMixed writes about n bytes over a few files: compressible text,
// random bytes, zeros, and small and empty files.
func writeMixed(t *testing.T, dir string, n int64) {
	r := rand.New(rand.NewPCG(7, 7))
	write := func(name string, size int64, gen func([]byte)) {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<20)
		for size > 0 {
			k := min(size, int64(len(buf)))
			gen(buf[:k])
			if _, err := f.Write(buf[:k]); err != nil {
				t.Fatal(err)
			}
			size -= k
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	text := func(b []byte) {
		words := []string{"customer", "order", "shipped", "2026-11-21", "NULL", "refund", "\t", "\n"}
		i := 0
		for i < len(b) {
			w := words[r.IntN(len(words))]
			if r.IntN(4) == 0 {
				w = fmt.Sprint(r.Uint32())
			}
			i += copy(b[i:], w)
		}
	}
	noise := func(b []byte) {
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	}
	zero := func(b []byte) { clear(b) }
	write("tables/users.tsv", n*40/100, text)
	write("tables/orders.tsv", n*20/100+12345, text)
	write("blobs/random.bin", n*25/100+1, noise)
	write("blobs/zeros.bin", n*15/100, zero)
	for i := 0; i < 50; i++ {
		write(fmt.Sprintf("small/%02d.txt", i), int64(r.IntN(10000)), text)
	}
	write("small/empty", 0, zero)
}

func TestRoundTrip200MB(t *testing.T) {
	if testing.Short() {
		t.Skip("200 MB round trip; -short skips it")
	}
	dir := t.TempDir()
	in, st, out := filepath.Join(dir, "in"), filepath.Join(dir, "st"), filepath.Join(dir, "out")
	writeMixed(t, in, 200<<20)
	pub, key := keys(t, dir)
	src := backupRestore(pub, key, in, st, out, `chunk_size = "1MiB"`)
	rep := run(t, src, "backup")
	if rep.Streams != 55 || len(rep.Manifests) != 1 {
		t.Fatalf("backup: %d streams, manifests %v", rep.Streams, rep.Manifests)
	}
	run(t, src, "restore")
	sameTree(t, in, out)
}

func TestRoundTrip10000Files(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 files; -short skips it")
	}
	dir := t.TempDir()
	in, st, out := filepath.Join(dir, "in"), filepath.Join(dir, "st"), filepath.Join(dir, "out")
	r := rand.New(rand.NewPCG(3, 3))
	for i := 0; i < 10000; i++ {
		p := filepath.Join(in, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("f%05d.dat", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		b := make([]byte, r.IntN(3000))
		for j := range b {
			b[j] = byte(r.IntN(16) + 'a')
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pub, key := keys(t, dir)
	src := backupRestore(pub, key, in, st, out, "streams = 4")
	if rep := run(t, src, "backup"); rep.Streams != 10000 {
		t.Fatalf("%d streams", rep.Streams)
	}
	run(t, src, "restore")
	sameTree(t, in, out)
}

// A restore follows the newest of several manifests under its source.
func TestRestorePicksNewestRun(t *testing.T) {
	dir := t.TempDir()
	in, st, out := filepath.Join(dir, "in"), filepath.Join(dir, "st"), filepath.Join(dir, "out")
	os.MkdirAll(in, 0o755)
	pub, key := keys(t, dir)
	src := backupRestore(pub, key, in, st, out, "")
	os.WriteFile(filepath.Join(in, "a"), []byte("first"), 0o644)
	run(t, src, "backup")
	os.WriteFile(filepath.Join(in, "a"), []byte("second"), 0o644)
	os.WriteFile(filepath.Join(in, "b"), []byte("new file"), 0o644)
	second := run(t, src, "backup")
	rep := run(t, src, "restore")
	if !strings.HasSuffix(second.Manifests[0], rep.ManifestRead) {
		t.Fatalf("restored from %s, want the second run %s", rep.ManifestRead, second.Manifests[0])
	}
	if b, _ := os.ReadFile(filepath.Join(out, "a")); string(b) != "second" {
		t.Fatalf("a = %q", b)
	}
	sameTree(t, in, out)
}
