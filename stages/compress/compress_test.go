package compress

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/engine/stagetest"
)

const chunk = 64 << 10

// text returns n bytes of compressible, not trivially repetitive data.
func text(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"alpha", "beta", "gamma", "delta", "epsilon", "1234", "2026-11-21", "NULL", "\t", "\n", "zeta", "eta"}
	var b bytes.Buffer
	for b.Len() < n {
		b.WriteString(words[r.IntN(len(words))])
		if r.IntN(5) == 0 {
			fmt.Fprintf(&b, "%d", r.Uint32())
		}
		b.WriteByte(' ')
	}
	return b.Bytes()[:n]
}

func cases() map[string][]byte {
	return map[string][]byte{
		"empty":   {},
		"one":     {'x'},
		"chunk":   text(1, chunk),
		"chunk+1": text(2, chunk+1),
		"many":    text(3, 20*chunk+77),
	}
}

func roundTrip(t *testing.T, c *Codec, level int, data map[string][]byte) map[string][]byte {
	t.Helper()
	cs, err := c.Stage(level, 2, chunk)
	if err != nil {
		t.Fatal(err)
	}
	packed, _, err := stagetest.Run(t, []engine.Stage{cs}, chunk, data)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := stagetest.Run(t, []engine.Stage{c.DecompressStage(2, chunk)}, chunk, packed)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range data {
		if !bytes.Equal(out[k], want) {
			t.Fatalf("%s level %d, %s: got %d bytes, want %d", c.Name, level, k, len(out[k]), len(want))
		}
	}
	return packed
}

func TestRoundTrip(t *testing.T) {
	for _, name := range []string{"zstd", "gzip", "lz4"} {
		c, _ := Lookup(name)
		for _, level := range []int{c.MinLevel, c.DefaultLevel, min(c.MaxLevel, 9)} {
			t.Run(fmt.Sprintf("%s-%d", name, level), func(t *testing.T) {
				packed := roundTrip(t, c, level, cases())
				if len(packed["many"]) >= len(cases()["many"]) {
					t.Fatalf("%d bytes did not compress (%d)", len(cases()["many"]), len(packed["many"]))
				}
				if len(packed["empty"]) == 0 {
					t.Fatal("an empty stream must still be a valid (non-empty) compressed file")
				}
			})
		}
	}
}

// tool returns the path of a codec's command-line tool. In CI a missing
// tool is a failure: make test-deps installs them.
func tool(t *testing.T, name string) string {
	p, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s is not installed; make test-deps installs it", name)
		}
		t.Skipf("%s is not installed", name)
	}
	return p
}

// The stored files are standard: the codec's own tool reads ours, and we
// read the tool's (a single zstd frame takes the sequential path).
func TestInteropWithTools(t *testing.T) {
	for _, name := range []string{"zstd", "gzip", "lz4"} {
		t.Run(name, func(t *testing.T) {
			bin := tool(t, name)
			c, _ := Lookup(name)
			data := cases()
			packed := roundTrip(t, c, c.DefaultLevel, data)
			dir := t.TempDir()
			for k, want := range data {
				f := filepath.Join(dir, k+c.Ext)
				if err := os.WriteFile(f, packed[k], 0o600); err != nil {
					t.Fatal(err)
				}
				got, err := exec.Command(bin, "-d", "-c", f).Output()
				if err != nil {
					t.Fatalf("%s -d %s: %v", name, k, err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s -d %s: %d bytes, want %d", name, k, len(got), len(want))
				}
				// And the other way round.
				raw := filepath.Join(dir, k)
				os.WriteFile(raw, want, 0o600)
				theirs, err := exec.Command(bin, "-c", raw).Output()
				if err != nil {
					t.Fatalf("%s -c: %v", name, err)
				}
				out, _, err := stagetest.Run(t, []engine.Stage{c.DecompressStage(2, chunk)}, chunk/4, map[string][]byte{k: theirs})
				if err != nil {
					t.Fatalf("decompressing %s's output for %s: %v", name, k, err)
				}
				if !bytes.Equal(out[k], want) {
					t.Fatalf("decompressing %s's output for %s: %d bytes, want %d", name, k, len(out[k]), len(want))
				}
			}
		})
	}
}

// Our zstd output is one frame per chunk, and the splitter finds each one.
func TestZstdFrames(t *testing.T) {
	c, _ := Lookup("zstd")
	data := map[string][]byte{"s": text(9, 10*chunk+5)}
	packed := roundTrip(t, c, 3, data)
	r := bytes.NewReader(packed["s"])
	frames := 0
	for {
		buf := make([]byte, 0, Bound(chunk))
		_, err := zstdDecoders{}.NextUnit(r, buf)
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatal(err)
			}
			break
		}
		frames++
	}
	if frames != 11 {
		t.Fatalf("%d frames, want 11", frames)
	}
}

func TestCorruptInput(t *testing.T) {
	data := map[string][]byte{"s": text(4, 5*chunk)}
	for _, name := range []string{"zstd", "gzip", "lz4"} {
		c, _ := Lookup(name)
		packed := roundTrip(t, c, c.DefaultLevel, data)["s"]
		bad := map[string][]byte{
			"truncated": packed[:len(packed)-len(packed)/3],
			"garbage":   []byte("this is not compressed data at all, not even close"),
		}
		flipped := bytes.Clone(packed)
		flipped[len(flipped)/2] ^= 0xff
		bad["flipped"] = flipped
		for kind, in := range bad {
			t.Run(name+"/"+kind, func(t *testing.T) {
				out, _, err := stagetest.Run(t, []engine.Stage{c.DecompressStage(2, chunk)}, chunk, map[string][]byte{"s": in})
				if err == nil {
					t.Fatalf("no error; got %d bytes", len(out["s"]))
				}
				if !strings.Contains(err.Error(), "decompress ("+name+")") {
					t.Fatalf("error does not name the stage: %v", err)
				}
				if _, ok := out["s"]; ok {
					t.Fatal("a corrupt stream was committed")
				}
			})
		}
	}
}

func TestLevels(t *testing.T) {
	c, _ := Lookup("zstd")
	if _, err := c.Stage(23, 1, chunk); err == nil || !strings.Contains(err.Error(), "zstd levels run from 1 to 22") {
		t.Fatalf("err = %v", err)
	}
	if c, ok := ByExt("dump.tar.gz"); !ok || c.Name != "gzip" {
		t.Fatalf("ByExt: %v %v", c, ok)
	}
	if fmt.Sprint(Names()) != "[none gzip lz4 zstd]" {
		t.Fatal(Names())
	}
}

// Blocks without any match (base64 of random bytes) are still entropy
// coded from level 3, as the zstd tool does.
func TestZstdCodesLiteralOnlyBlocks(t *testing.T) {
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	r := rand.New(rand.NewPCG(5, 5))
	b64 := make([]byte, 4*chunk)
	for i := range b64 {
		b64[i] = alphabet[r.IntN(64)]
	}
	c, _ := Lookup("zstd")
	packed := roundTrip(t, c, 3, map[string][]byte{"b64": b64})["b64"]
	if ratio := float64(len(b64)) / float64(len(packed)); ratio < 1.25 {
		t.Fatalf("base64 compressed %.2f×; entropy coding of literals gives about 1.33×", ratio)
	}
}
