package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// decodeScenarios (issue: backups you can see, pick, check): a zstd run
// (pipe's backup of the data set, 2 workers) restored from its run folder
// into a file, and verified with --decrypt (decoded to nowhere), each
// against zstd -d of its object. Two rows of the Throughput table.
func (b *bench) decodeScenarios(ctx context.Context) ([]*race, error) {
	logf("scenario: decoding a zstd run (restore, verify --decrypt) vs zstd -d")
	if err := needTools(exec.LookPath, "Debian: zstd", "zstd"); err != nil {
		return nil, err
	}
	runs := filepath.Join(b.work, "decode-runs")
	defer os.RemoveAll(runs)
	zst, err := b.decodeBackup(ctx, runs)
	if err != nil {
		return nil, err
	}
	zi, err := os.Stat(zst)
	if err != nil {
		return nil, err
	}
	outDir := filepath.Join(b.work, "decode-out")
	restore, err := writePipeline(b.hcl, "decode_restore", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  decompress {
    workers = 2
  }
  sink "fs" {
    path = %s
  }
`, hclString(runs+"/"), hclString(outDir+"/")))
	if err != nil {
		return nil, err
	}
	refOut := filepath.Join(b.work, "decode-ref.out")
	defer os.Remove(refOut)
	zstdArgs := []string{"zstd", "-d", "-q", "-f", "-o", refOut, zst}
	zstd := func(target float64) *contender {
		return &contender{label: "zstd -d", target: target, clean: removing(refOut),
			run: commands(nil, zstdArgs), check: sizeIs(refOut, b.size)}
	}
	// pipe's fs sink syncs what it restores: the like-for-like reference
	// syncs too (issue 40: both synced or both not).
	zstdSynced := &contender{label: "zstd -d + sync -d", target: 1.6, clean: removing(refOut),
		run: commands(nil, zstdArgs, []string{"sync", "-d", refOut}), check: sizeIs(refOut, b.size)}
	data := fmt.Sprintf("a run of it: one %s .zst object (%s → %s)", "zstd -3", mb(zi.Size()), mb(b.size))

	rs := &race{name: "restore a zstd run, 2 workers (digest checked)", data: data, bytes: b.size,
		pipe: &contender{label: "pipe", clean: removing(outDir), run: b.pipeRun(restore, zi.Size()),
			check: sameAs(filepath.Join(outDir, filepath.Base(b.data)), b.data, b.size)},
		refs: []*contender{zstd(1.6), zstdSynced}}
	err = rs.run(ctx, b.cfg.reps)
	os.RemoveAll(outDir)
	if err != nil {
		return nil, err
	}

	verify := commands(nil, []string{b.cfg.pipe, "verify", restore, "--decrypt", "--json"})
	vs := &race{name: "verify --decrypt of a zstd run (decoded to nowhere)", data: data, bytes: b.size,
		pipe: &contender{label: "pipe verify --decrypt", run: verifiedBy(verify)},
		// zstd -t is how an operator checks a .zst: it decodes (and checks
		// a checksum where a frame carries one) and writes nothing, as
		// verify does.
		refs:  []*contender{zstd(1.8), {label: "zstd -t", target: 1.8, run: commands(nil, []string{"zstd", "-t", "-q", zst})}},
		notes: []string{"pipe reads the object, checks its SHA-256 and decodes its frames on 2 workers; zstd -d decodes on one and writes a file; zstd -t decodes on one, checks what each frame carries (pipe's carry no checksum: the SHA-256 covers them) and writes nothing"}}
	if err := vs.run(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	return []*race{rs, vs}, nil
}

// decodeBackup backs the data set up into a run folder under runs, with
// zstd level 3 on 2 workers, and returns its one object.
func (b *bench) decodeBackup(ctx context.Context, runs string) (string, error) {
	backup, err := writePipeline(b.hcl, "decode_backup", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  compress {
    level   = 3
    workers = 2
  }
  sink "fs" {
    path = %s
  }
`, hclString(b.data), hclString(runs+"/${run.id}/")))
	if err != nil {
		return "", err
	}
	if _, err := runPipe(ctx, b.cfg.pipe, backup, b.size); err != nil {
		return "", err
	}
	objs, _ := filepath.Glob(filepath.Join(runs, "*", filepath.Base(b.data)+".zst"))
	if len(objs) != 1 {
		return "", fmt.Errorf("the decode scenario's backup left %d objects", len(objs))
	}
	return objs[0], nil
}

// verifiedBy is a run of `pipe verify … --json` (run) that fails unless
// pipe found the run good.
func verifiedBy(run runFunc) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		m, err := run(ctx, rep)
		if err == nil && !strings.Contains(string(m.stdout), `"ok": true`) {
			err = fmt.Errorf("pipe verify did not find the run good: %s", m.stdout)
		}
		return m, err
	}
}
