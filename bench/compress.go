package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// compressScenario: zstd -3 with 2 workers vs zstd -3 -T2 (and + sync -d);
// keeps pipe's output of the first run for the decompress scenario.
func (b *bench) compressScenario(ctx context.Context) ([]*race, error) {
	logf("scenario 2: zstd -3, 2 workers, vs zstd -3 -T2")
	outDir := filepath.Join(b.work, "pipe-zst")
	file, err := writePipeline(b.hcl, "compress", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  compress {
    codec   = "zstd"
    level   = 3
    workers = 2
  }
  sink "fs" {
    path = %s
  }
`, hclString(b.data), hclString(outDir+"/")))
	if err != nil {
		return nil, err
	}
	keepDir := filepath.Join(b.work, "zst")
	if err := os.MkdirAll(keepDir, 0o755); err != nil {
		return nil, err
	}
	var sizes []int64 // pipe's compressed size, run by run
	check := func(ctx context.Context, rep int) error {
		out := filepath.Join(outDir, filepath.Base(b.data)+".zst")
		n, err := checkSize(out, -1)
		if err != nil {
			return err
		}
		if n >= b.size {
			return fmt.Errorf("%s: %d bytes from %d did not compress", out, n, b.size)
		}
		sizes = append(sizes, n)
		if rep == 0 {
			if err := sameAfterZstd(ctx, out, b.data); err != nil {
				return err
			}
			b.zst = filepath.Join(keepDir, filepath.Base(out))
			return os.Rename(out, b.zst)
		}
		return nil
	}
	refOut := filepath.Join(b.work, "ref.zst")
	zstd := []string{"zstd", "-3", "-T2", "-f", "-o", refOut, b.data}
	r := &race{name: "compress zstd -3, 2 workers", data: b.dataLabel(), bytes: b.size,
		pipe: &contender{label: "pipe", clean: removing(outDir), run: b.pipeRun(file, b.size), check: check},
		refs: []*contender{
			{label: "zstd -3 -T2", target: 1.0, clean: removing(refOut), run: commands(nil, zstd), check: sizeIs(refOut, -1)},
			{label: "zstd -3 -T2 + sync -d", target: 1.0, clean: removing(refOut), run: commands(nil, zstd, []string{"sync", "-d", refOut}), check: sizeIs(refOut, -1)},
		}}
	os.RemoveAll(outDir)
	defer os.RemoveAll(outDir)
	if err := r.run(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	// One more, untimed, for the reference's compressed size.
	if _, err := timeCommands(ctx, nil, zstd); err != nil {
		return nil, err
	}
	refSize, err := checkSize(refOut, -1)
	os.Remove(refOut)
	if err != nil {
		return nil, err
	}
	r.notes = compressionNotes(b.size, refSize, sizes)
	return []*race{r}, nil
}

// compressionNotes say what the data set compressed to: pipe's size (that
// of every run, sizes) against zstd's (ref), both from size bytes.
func compressionNotes(size, ref int64, sizes []int64) []string {
	notes := []string{fmt.Sprintf("Compressed size: pipe %s (%.2f×), zstd -3 %s (%.2f×).",
		mb(sizes[0]), float64(size)/float64(sizes[0]), mb(ref), float64(size)/float64(ref))}
	if r := float64(size) / float64(ref); r < 2.5 || r > 4 {
		notes = append(notes, fmt.Sprintf("The data set compresses %.2f× with zstd -3, outside the intended 2.5-4×: check the generator.", r))
	}
	for _, n := range sizes[1:] {
		if n != sizes[0] {
			notes = append(notes, fmt.Sprintf("pipe's compressed size varied between runs: %v bytes.", sizes))
			break
		}
	}
	return notes
}
