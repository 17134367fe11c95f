package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// decompressScenario: pipe's .zst from the compress scenario, decompressed
// by pipe (2 workers) and by zstd -d (and + sync -d).
func (b *bench) decompressScenario(ctx context.Context) ([]*race, error) {
	logf("scenario 3: decompress pipe's .zst, 2 workers, vs zstd -d")
	if b.zst == "" {
		return nil, fmt.Errorf("decompress needs the compress scenario's output")
	}
	outDir := filepath.Join(b.work, "pipe-dec")
	file, err := writePipeline(b.hcl, "decompress", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  decompress {
    workers = 2
  }
  sink "fs" {
    path = %s
  }
`, hclString(b.zst), hclString(outDir+"/")))
	if err != nil {
		return nil, err
	}
	zi, err := os.Stat(b.zst)
	if err != nil {
		return nil, err
	}
	refOut := filepath.Join(b.work, "ref.out")
	zstd := []string{"zstd", "-d", "-f", "-o", refOut, b.zst}
	r := &race{name: "decompress zstd, 2 workers", data: fmt.Sprintf("pipe's .zst of it (%s → %s)", mb(zi.Size()), mb(b.size)), bytes: b.size,
		pipe: &contender{label: "pipe", clean: removing(outDir), run: b.pipeRun(file, zi.Size()),
			check: sameAs(filepath.Join(outDir, filepath.Base(b.data)), b.data, b.size)},
		refs: []*contender{
			// The reference's output is checked in full once too: it is
			// the same file, so both tools must produce the original bytes.
			{label: "zstd -d", target: 1.6, clean: removing(refOut), run: commands(nil, zstd), check: sameAs(refOut, b.data, b.size)},
			{label: "zstd -d + sync -d", target: 1.6, clean: removing(refOut), run: commands(nil, zstd, []string{"sync", "-d", refOut}), check: sizeIs(refOut, b.size)},
		}}
	os.RemoveAll(outDir)
	defer os.RemoveAll(outDir)
	defer os.Remove(refOut)
	return []*race{r}, r.run(ctx, b.cfg.reps)
}
