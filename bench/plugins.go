package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// inProcess runs pipe's built-in endpoints inside pipe instead of in its
// plugin process.
const inProcess = "PIPE_BUILTINS=inprocess"

// pluginScenarios run the copy and the zstd pipelines with the built-in
// endpoints behind the plugin protocol (as pipe always runs them) and
// in-process, on the same data, interleaved; the reference is the
// in-process run. Then the start-up cost: what the plugin process adds to
// a one-byte run.
func (b *bench) pluginScenarios(ctx context.Context, rep *report) error {
	logf("scenario 4: through the plugin boundary vs in-process")
	for _, sc := range []struct {
		name, file, stage string
		ext               string
	}{
		{"plugin boundary: fs → fs copy", "plugin_copy", "", ""},
		{"plugin boundary: zstd -3, 2 workers", "plugin_zstd", "  compress {\n    codec   = \"zstd\"\n    level   = 3\n    workers = 2\n  }\n", ".zst"},
	} {
		outDir := filepath.Join(b.work, "plugin-out")
		file, err := writePipeline(b.hcl, sc.file, fmt.Sprintf("  source \"fs\" {\n    path = %s\n  }\n%s  sink \"fs\" {\n    path = %s\n  }\n",
			hclString(b.data), sc.stage, hclString(outDir+"/")))
		if err != nil {
			return err
		}
		want := b.size // the copy's output is the data set; zstd's, smaller
		if sc.ext != "" {
			want = -1
		}
		check := sizeIs(filepath.Join(outDir, filepath.Base(b.data)+sc.ext), want)
		r := &race{name: sc.name, data: b.dataLabel(), bytes: b.size,
			pipe: &contender{label: "pipe (plugin)", clean: removing(outDir), run: b.pipeRun(file, b.size), check: check},
			refs: []*contender{{label: "pipe, endpoints in-process", target: 0.9, clean: removing(outDir),
				run: b.pipeRun(file, b.size, inProcess), check: check}}}
		err = r.run(ctx, b.cfg.reps)
		os.RemoveAll(outDir)
		if err != nil {
			return err
		}
		rep.throughput = append(rep.throughput, r)
	}
	startup, err := b.startupCost(ctx)
	if err != nil {
		return err
	}
	rep.startup = startup
	return nil
}

// startupCost times a one-byte copy with the endpoints in their plugin
// process and in-process, 21 times each, alternating: what starting the
// plugin process adds to a run.
func (b *bench) startupCost(ctx context.Context) (*race, error) {
	logf("scenario 5: start-up cost of the plugin process")
	dir := filepath.Join(b.work, "startup")
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	one := filepath.Join(dir, "one")
	if err := os.WriteFile(one, []byte{1}, 0o644); err != nil {
		return nil, err
	}
	file, err := writePipeline(b.hcl, "startup", fmt.Sprintf("  source \"fs\" {\n    path = %s\n  }\n  sink \"fs\" {\n    path = %s\n  }\n", hclString(one), hclString(filepath.Join(dir, "out")+"/")))
	if err != nil {
		return nil, err
	}
	r := &race{name: "start-up: a one-byte fs → fs run", bytes: 1, noWarmup: true, noSync: true,
		pipe: &contender{label: "pipe (plugin)", run: b.pipeRun(file, 1)},
		refs: []*contender{{label: "pipe, endpoints in-process", run: b.pipeRun(file, 1, inProcess)}}}
	return r, r.run(ctx, startupRuns)
}

// startupRuns is how many times the start-up race runs each contender.
const startupRuns = 21
