package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// copyScenario: fs → fs with no stages vs cp, and cp + sync -d (pipe's fs
// sink fsyncs what it writes; cp does not).
func (b *bench) copyScenario(ctx context.Context) ([]*race, error) {
	logf("scenario 1: fs → fs, no stages, vs cp")
	outDir := filepath.Join(b.work, "pipe-copy")
	file, err := writePipeline(b.hcl, "copy", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  sink "fs" {
    path = %s
  }
`, hclString(b.data), hclString(outDir+"/")))
	if err != nil {
		return nil, err
	}
	cpOut := filepath.Join(b.work, "cp.out")
	cp := []string{"cp", b.data, cpOut}
	r := &race{name: "fs → fs copy, no stages", data: b.dataLabel(), bytes: b.size,
		pipe: &contender{label: "pipe", clean: removing(outDir), run: b.pipeRun(file, b.size),
			check: sameAs(filepath.Join(outDir, filepath.Base(b.data)), b.data, b.size)},
		refs: []*contender{
			{label: "cp", target: 0.9, clean: removing(cpOut), run: commands(nil, cp), check: sizeIs(cpOut, b.size)},
			{label: "cp + sync -d", target: 0.9, clean: removing(cpOut), run: commands(nil, cp, []string{"sync", "-d", cpOut}), check: sizeIs(cpOut, b.size)},
		}}
	os.RemoveAll(outDir)
	defer os.RemoveAll(outDir)
	defer os.Remove(cpOut)
	return []*race{r}, r.run(ctx, b.cfg.reps)
}
