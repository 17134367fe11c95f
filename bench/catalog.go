package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The catalog scenario (issue: backups you can see, pick, check): listing
// 1,000 runs against mc ls --recursive and verifying a 2 GiB run against
// mc cat | sha256sum, on MinIO. Decoding a run is decode.go's.

// catalogResult is the catalog's scenario on MinIO.
type catalogResult struct {
	runs       int
	list       *race         // pipe backups vs mc ls --recursive
	coldList   time.Duration // pipe backups without the index (every manifest read)
	verifySize int64
	verify     *race // pipe verify vs mc cat | sha256sum
}

// catalogScenario lists n runs and verifies a large run on MinIO.
func (b *bench) catalogScenario(ctx context.Context) (*catalogResult, error) {
	mc := b.cfg.mc
	n, bigSize := 1000, int64(2<<30)
	if b.cfg.quick {
		n, bigSize = 100, 256<<20
	}
	logf("scenario: the catalog on MinIO: pipe backups over %d runs vs mc ls --recursive; pipe verify of %s vs mc cat | sha256sum", n, mib(bigSize))
	m, err := b.startMinIO(ctx, mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	res := &catalogResult{runs: n, verifySize: bigSize}
	pipeEnv := []string{"PIPE_VAR_secret=" + minioSecret}

	// n runs of a pipeline "p", each a manifest and two small objects,
	// written as pipe writes them and copied up in one mc mirror.
	tree := filepath.Join(b.work, "catalog-runs")
	if err := fakeRuns(tree, n); err != nil {
		return nil, err
	}
	prefix := mcAlias + "/" + s3Bucket + "/cat/p/"
	if _, err := timeCommand(ctx, []string{mc, "mirror", "--quiet", tree + "/", prefix}, m.mcEnv...); err != nil {
		return nil, err
	}
	os.RemoveAll(tree)
	list, err := writePipeline(b.hcl, "p", fmt.Sprintf(`  source "fs" {
    path = "unused"
  }
  sink "s3" {
%s    key               = "cat/${pipeline.name}/${run.id}/"
  }
`, m.attrs()), "secret")
	if err != nil {
		return nil, err
	}
	listOnce := func(ctx context.Context) (measurement, error) {
		m, err := timeCommand(ctx, []string{b.cfg.pipe, "backups", list, "--json"}, pipeEnv...)
		if err == nil {
			if got := strings.Count(string(m.stdout), `"run_id":`); got != n {
				err = fmt.Errorf("pipe backups listed %d runs, want %d", got, n)
			}
		}
		return m, err
	}
	cold, err := listOnce(ctx) // reads every manifest, then writes the index
	if err != nil {
		return nil, err
	}
	res.coldList = cold.wall
	logf("  pipe backups without an index: %s", cold.wall.Round(time.Millisecond))
	ls := &race{name: fmt.Sprintf("list %d runs (%d objects)", n, 3*n+1)}
	ls.pipe = &contender{label: "pipe backups", run: func(ctx context.Context, rep int) (measurement, error) { return listOnce(ctx) }}
	ls.refs = []*contender{{label: "mc ls --recursive", target: 1 / 1.5, run: func(ctx context.Context, rep int) (measurement, error) {
		m, err := timeCommand(ctx, []string{mc, "ls", "--recursive", prefix}, m.mcEnv...)
		if err == nil {
			if got := strings.Count(string(m.stdout), "pipe-manifest.json"); got != n {
				err = fmt.Errorf("mc ls listed %d manifests, want %d", got, n)
			}
		}
		return m, err
	}}}
	if err := ls.run(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	res.list = ls

	// One large run, stored as it is (no stages), verified against
	// mc cat | sha256sum of its object.
	data, err := ensureData(b.cfg.dataDir, bigSize, logf)
	if err != nil {
		return nil, err
	}
	big, err := writePipeline(b.hcl, "big", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  sink "s3" {
%s    key               = "big/${pipeline.name}/${run.id}/"
  }
`, hclString(data), m.attrs()), "secret")
	if err != nil {
		return nil, err
	}
	if _, err := runPipe(ctx, b.cfg.pipe, big, bigSize, pipeEnv...); err != nil {
		return nil, err
	}
	out, err := timeCommand(ctx, []string{mc, "ls", "--recursive", mcAlias + "/" + s3Bucket + "/big/"}, m.mcEnv...)
	if err != nil {
		return nil, err
	}
	var obj string
	for _, l := range strings.Split(string(out.stdout), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasSuffix(f[len(f)-1], filepath.Base(data)) {
			obj = mcAlias + "/" + s3Bucket + "/big/" + f[len(f)-1]
		}
	}
	if obj == "" {
		return nil, fmt.Errorf("the large run's object is not in the bucket:\n%s", out.stdout)
	}
	want, err := fileDigest(data)
	if err != nil {
		return nil, err
	}
	vs := &race{name: "verify a run of one " + mib(bigSize) + " object", data: "pg_dump text, stored as is", bytes: bigSize}
	vs.pipe = &contender{label: "pipe verify", run: func(ctx context.Context, rep int) (measurement, error) {
		m, err := timeCommand(ctx, []string{b.cfg.pipe, "verify", big, "--json"}, pipeEnv...)
		if err == nil && !strings.Contains(string(m.stdout), `"ok": true`) {
			err = fmt.Errorf("pipe verify did not find the run good: %s", m.stdout)
		}
		return m, err
	}}
	vs.refs = []*contender{{label: "mc cat | sha256sum", target: 1, run: func(ctx context.Context, rep int) (measurement, error) {
		m, err := timeCommand(ctx, []string{"bash", "-o", "pipefail", "-c", `"$0" cat "$1" | sha256sum`, mc, obj}, m.mcEnv...)
		if err == nil && !strings.HasPrefix(string(m.stdout), want) {
			err = fmt.Errorf("mc cat | sha256sum printed %q, want %s", m.stdout, want)
		}
		return m, err
	}}}
	if err := vs.run(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	res.verify = vs
	return res, nil
}

// fakeRuns writes n runs of pipeline "p" under dir as pipe's fs sink
// would: a folder per run id with two small objects and a manifest.
func fakeRuns(dir string, n int) error {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range n {
		start := t0.Add(time.Duration(i) * time.Hour)
		id := fmt.Sprintf("%s-%06x", start.Format("20060102T150405Z"), i)
		run := filepath.Join(dir, id)
		if err := os.MkdirAll(run, 0o755); err != nil {
			return err
		}
		type object struct {
			Stream       string `json:"stream"`
			Key          string `json:"key"`
			Size         int64  `json:"size"`
			OriginalSize int64  `json:"original_size"`
			Digest       string `json:"digest"`
			Codec        string `json:"codec"`
		}
		var objs []object
		for _, name := range []string{"orders.tsv", "users.tsv"} {
			body := []byte(fmt.Sprintf("run %d, %s\n", i, name))
			if err := os.WriteFile(filepath.Join(run, name), body, 0o644); err != nil {
				return err
			}
			objs = append(objs, object{Stream: name, Key: name, Size: int64(len(body)), OriginalSize: int64(len(body)),
				Digest: fmt.Sprintf("sha256:%x", sha256.Sum256(body)), Codec: "none"})
		}
		man, err := json.MarshalIndent(map[string]any{"format": "pipe-manifest/v1", "run_id": id, "pipeline": "p",
			"started_at": start, "finished_at": start.Add(time.Minute), "source": map[string]string{"type": "fs"}, "objects": objs}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(run, "pipe-manifest.json"), man, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// fileDigest is the hex SHA-256 of a file.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}

func (r *catalogResult) races() []*race { return []*race{r.list, r.verify} }

func (r *catalogResult) markdown(w writer) {
	w("\n## The catalog on MinIO\n\n")
	lp, lm := median(r.list.pipe.times), median(r.list.refs[0].times)
	vp, vm := median(r.verify.pipe.times), median(r.verify.refs[0].times)
	w("| what | pipe | reference | pipe / reference (time) | target | met? |\n|---|---|---|---|---|---|\n")
	w("| list %d runs (`pipe backups FILE --json`, through the store's index) | %.3f s | `mc ls --recursive` %.3f s | %.2f× | ≤ 1.5× | %s |\n",
		r.runs, lp.Seconds(), lm.Seconds(), lp.Seconds()/lm.Seconds(), yesNo(lp.Seconds()/lm.Seconds() <= 1.5))
	w("| verify a run of one %s object (`pipe verify FILE`: size and SHA-256) | %.3f s (%s) | `mc cat \\| sha256sum` %.3f s (%s) | %.2f× | ≤ 1.0× | %s |\n",
		mib(r.verifySize), vp.Seconds(), rate(r.verifySize, vp), vm.Seconds(), rate(r.verifySize, vm), vp.Seconds()/vm.Seconds(), yesNo(vp <= vm))
	w("\nWithout its index (a store written by an older pipe, or an index lost), the listing read every manifest: %.3f s, once.\n", r.coldList.Seconds())
}
