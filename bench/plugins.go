package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// inProcess runs pipe's built-in endpoints inside pipe instead of in its
// plugin process.
const inProcess = "PIPE_BUILTINS=inprocess"

// pluginScenarios run the copy and the zstd pipelines with the built-in
// endpoints behind the plugin protocol (as pipe always runs them) and
// in-process, on the same data, interleaved; the reference is the
// in-process run.
func (b *bench) pluginScenarios(ctx context.Context) ([]*scenarioResult, error) {
	logf("scenario 4: through the plugin boundary vs in-process")
	var out []*scenarioResult
	for _, sc := range []struct {
		name, file, stage string
		ext               string
	}{
		{"plugin boundary: fs → fs copy", "plugin_copy", "", ""},
		{"plugin boundary: zstd -3, 2 workers", "plugin_zstd", "  compress {\n    codec   = \"zstd\"\n    level   = 3\n    workers = 2\n  }\n", ".zst"},
	} {
		s := &scenarioResult{name: sc.name, data: b.dataLabel(), bytes: b.size}
		outDir := filepath.Join(b.work, "plugin-out")
		file, err := writePipeline(b.hcl, sc.file, fmt.Sprintf("  source \"fs\" {\n    path = %s\n  }\n%s  sink \"fs\" {\n    path = %s\n  }\n",
			hclString(b.data), sc.stage, hclString(outDir+"/")))
		if err != nil {
			return nil, err
		}
		check := func(ctx context.Context, rep int) error {
			out := filepath.Join(outDir, filepath.Base(b.data)+sc.ext)
			_, err := checkSize(out, map[bool]int64{true: b.size, false: -1}[sc.ext == ""])
			return err
		}
		s.pipe = b.pipeContender(s, file, outDir, b.size, check)
		s.pipe.label = "pipe (plugin)"
		ref := b.pipeContender(s, file, outDir, b.size, check)
		ref.label, ref.target, ref.env = "pipe, endpoints in-process", 0.9, []string{inProcess}
		s.refs = []*contender{ref}
		err = s.interleave(ctx, b.cfg.reps)
		os.RemoveAll(outDir)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// startupCost times a one-byte copy with the endpoints in their plugin
// process and in-process: what starting the plugin process adds to a run.
func (b *bench) startupCost(ctx context.Context) (plugin, inproc time.Duration, err error) {
	logf("scenario 5: start-up cost of the plugin process")
	dir := filepath.Join(b.work, "startup")
	defer os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, 0, err
	}
	one := filepath.Join(dir, "one")
	if err := os.WriteFile(one, []byte{1}, 0o644); err != nil {
		return 0, 0, err
	}
	file, err := writePipeline(b.hcl, "startup", fmt.Sprintf("  source \"fs\" {\n    path = %s\n  }\n  sink \"fs\" {\n    path = %s\n  }\n", hclString(one), hclString(filepath.Join(dir, "out")+"/")))
	if err != nil {
		return 0, 0, err
	}
	var p, q []time.Duration
	for i := 0; i < 21; i++ {
		for _, env := range [][]string{nil, {inProcess}} {
			r, err := runPipe(ctx, b.cfg.pipe, file, 1, env...)
			if err != nil {
				return 0, 0, err
			}
			if env == nil {
				p = append(p, r.wall)
			} else {
				q = append(q, r.wall)
			}
		}
	}
	return median(p), median(q), nil
}
