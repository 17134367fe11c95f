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
	n, bigSize := 1000, int64(2<<30)
	if b.cfg.quick {
		n, bigSize = 100, 256<<20
	}
	logf("scenario: the catalog on MinIO: pipe backups over %d runs vs mc ls --recursive; pipe verify of %s vs mc cat | sha256sum", n, mib(bigSize))
	m, err := b.startMinIO(ctx, b.cfg.mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	c := &catalogBench{bench: b, m: m, pipeEnv: []string{"PIPE_VAR_secret=" + minioSecret}}
	res := &catalogResult{runs: n, verifySize: bigSize}
	if res.list, res.coldList, err = c.listRace(ctx, n); err != nil {
		return nil, err
	}
	if res.verify, err = c.verifyRace(ctx, bigSize); err != nil {
		return nil, err
	}
	return res, nil
}

// catalogBench is the catalog scenario's set-up.
type catalogBench struct {
	*bench
	m       *minio
	pipeEnv []string
}

// listRace stores n runs of a pipeline "p", each a manifest and two small
// objects, written as pipe writes them and copied up in one mc mirror;
// lists them once without the store's index (cold: every manifest read,
// then the index written), then races `pipe backups` against mc ls.
func (c *catalogBench) listRace(ctx context.Context, n int) (r *race, cold time.Duration, err error) {
	tree := filepath.Join(c.work, "catalog-runs")
	if err := fakeRuns(tree, n); err != nil {
		return nil, 0, err
	}
	prefix := object("cat/p/")
	if _, err := timeCommand(ctx, []string{c.cfg.mc, "mirror", "--quiet", tree + "/", prefix}, c.m.mcEnv...); err != nil {
		return nil, 0, err
	}
	os.RemoveAll(tree)
	list, err := writePipeline(c.hcl, "p", fmt.Sprintf(`  source "fs" {
    path = "unused"
  }
  sink "s3" {
%s    key               = "cat/${pipeline.name}/${run.id}/"
  }
`, c.m.attrs()), "secret")
	if err != nil {
		return nil, 0, err
	}
	pipe := counting(commands(c.pipeEnv, []string{c.cfg.pipe, "backups", list, "--json"}), `"run_id":`, n, "pipe backups listed %d runs, want %d")
	m, err := pipe(ctx, 0)
	if err != nil {
		return nil, 0, err
	}
	logf("  pipe backups without an index: %s", m.wall.Round(time.Millisecond))
	r = &race{name: fmt.Sprintf("list %d runs (%d objects)", n, 3*n+1),
		pipe: &contender{label: "pipe backups", run: pipe},
		refs: []*contender{{label: "mc ls --recursive", target: 1 / 1.5,
			run: counting(commands(c.m.mcEnv, []string{c.cfg.mc, "ls", "--recursive", prefix}), "pipe-manifest.json", n, "mc ls listed %d manifests, want %d")}}}
	return r, m.wall, r.run(ctx, c.cfg.reps)
}

// verifyRace stores one large run as it is (no stages) and verifies it,
// against mc cat | sha256sum of its object.
func (c *catalogBench) verifyRace(ctx context.Context, size int64) (*race, error) {
	data, err := ensureData(c.cfg.dataDir, size, logf)
	if err != nil {
		return nil, err
	}
	big, err := writePipeline(c.hcl, "big", fmt.Sprintf(`  source "fs" {
    path = %s
  }
  sink "s3" {
%s    key               = "big/${pipeline.name}/${run.id}/"
  }
`, hclString(data), c.m.attrs()), "secret")
	if err != nil {
		return nil, err
	}
	if _, err := runPipe(ctx, c.cfg.pipe, big, size, c.pipeEnv...); err != nil {
		return nil, err
	}
	obj, err := c.find(ctx, "big/", filepath.Base(data))
	if err != nil {
		return nil, err
	}
	want, err := fileDigest(data)
	if err != nil {
		return nil, err
	}
	sum := commands(c.m.mcEnv, []string{"bash", "-o", "pipefail", "-c", `"$0" cat "$1" | sha256sum`, c.cfg.mc, obj})
	r := &race{name: "verify a run of one " + mib(size) + " object", data: "pg_dump text, stored as is", bytes: size,
		pipe: &contender{label: "pipe verify", run: verifiedBy(commands(c.pipeEnv, []string{c.cfg.pipe, "verify", big, "--json"}))},
		refs: []*contender{{label: "mc cat | sha256sum", target: 1, run: func(ctx context.Context, rep int) (measurement, error) {
			m, err := sum(ctx, rep)
			if err == nil && !strings.HasPrefix(string(m.stdout), want) {
				err = fmt.Errorf("mc cat | sha256sum printed %q, want %s", m.stdout, want)
			}
			return m, err
		}}}}
	return r, r.run(ctx, c.cfg.reps)
}

// find names the object under prefix in the bench bucket whose name ends
// with suffix, as mc names it.
func (c *catalogBench) find(ctx context.Context, prefix, suffix string) (string, error) {
	out, err := timeCommand(ctx, []string{c.cfg.mc, "ls", "--recursive", object(prefix)}, c.m.mcEnv...)
	if err != nil {
		return "", err
	}
	var obj string
	for _, l := range strings.Split(string(out.stdout), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.HasSuffix(f[len(f)-1], suffix) {
			obj = object(prefix + f[len(f)-1])
		}
	}
	if obj == "" {
		return "", fmt.Errorf("the large run's object is not in the bucket:\n%s", out.stdout)
	}
	return obj, nil
}

// counting is run that fails unless its output holds want times substr;
// format says so with the count and want.
func counting(run runFunc, substr string, want int, format string) runFunc {
	return func(ctx context.Context, rep int) (measurement, error) {
		m, err := run(ctx, rep)
		if err == nil {
			if got := strings.Count(string(m.stdout), substr); got != want {
				err = fmt.Errorf(format, got, want)
			}
		}
		return m, err
	}
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
	lp, lm := r.list.pipe.median(), r.list.refs[0].median()
	vp, vm := r.verify.pipe.median(), r.verify.refs[0].median()
	lr, vr := timeRatio(lp, lm), timeRatio(vp, vm)
	w.table("what", "pipe", "reference", "pipe / reference (time)", "target", "met?")
	w("| list %d runs (`pipe backups FILE --json`, through the store's index) | %.3f s | `mc ls --recursive` %.3f s | %.2f× | ≤ 1.5× | %s |\n",
		r.runs, lp.Seconds(), lm.Seconds(), lr, yesNo(lr <= 1.5))
	w("| verify a run of one %s object (`pipe verify FILE`: size and SHA-256) | %.3f s (%s) | `mc cat \\| sha256sum` %.3f s (%s) | %.2f× | ≤ 1.0× | %s |\n",
		mib(r.verifySize), vp.Seconds(), rate(r.verifySize, vp), vm.Seconds(), rate(r.verifySize, vm), vr, yesNo(vr <= 1))
	w("\nWithout its index (a store written by an older pipe, or an index lost), the listing read every manifest: %.3f s, once.\n", r.coldList.Seconds())
}
