package main

import (
	"bytes"
	"cmp"
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"
)

// The object-store benchmark: pipe against MinIO's own client (mc) and
// rclone, on the same MinIO container, the same 2 GiB file, interleaved.
// First a sweep of pipe's part size and concurrency (one upload each),
// then the upload race with the fastest; a sweep of the download's range
// size, then the download race; then a 16 MiB WAL segment, whole process.

// s3Result is the object-store part of the report.
type s3Result struct {
	size                 int64
	upload, download     *race
	sweep                []sweepPoint
	best                 sweepPoint
	downSweep            []sweepPoint // download, at the upload's concurrency
	downBest             sweepPoint
	mcSync, rcSync       *contender // the durable download references
	wal                  *race      // pipe; pipe with PIPE_BUILTINS=inprocess; mc cp
	mcVersion, rcVersion string
}

type sweepPoint struct {
	partSize    int64
	concurrency int
	wall        time.Duration
}

// fastest is the point of a sweep that took the least time.
func fastest(points []sweepPoint) sweepPoint {
	return slices.MinFunc(points, func(a, b sweepPoint) int { return cmp.Compare(a.wall, b.wall) })
}

func (b *bench) s3Scenario(ctx context.Context) (*s3Result, error) {
	logf("scenario 6: object storage against MinIO: pipe, mc, rclone")
	size := int64(2 << 30)
	if b.cfg.quick {
		size = 256 << 20
	}
	m, err := b.startMinIO(ctx, b.cfg.mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	data, err := ensureData(b.cfg.dataDir, size, logf)
	if err == nil {
		// mc takes a relative path whose first part names an alias for
		// a remote one.
		data, err = filepath.Abs(data)
	}
	if err != nil {
		return nil, err
	}
	if err := warm(data); err != nil {
		return nil, err
	}
	s := &s3Bench{bench: b, m: m, data: data, size: size,
		pipeEnv: []string{"PIPE_VAR_secret=" + minioSecret},
		rcEnv: []string{"RCLONE_CONFIG_MINIO_TYPE=s3", "RCLONE_CONFIG_MINIO_PROVIDER=Minio", "RCLONE_CONFIG_MINIO_ACCESS_KEY_ID=" + minioUser,
			"RCLONE_CONFIG_MINIO_SECRET_ACCESS_KEY=" + minioSecret, "RCLONE_CONFIG_MINIO_ENDPOINT=" + m.endpoint, "RCLONE_CONFIG_MINIO_REGION=us-east-1",
			"RCLONE_CONFIG=" + filepath.Join(b.work, "rclone.conf")}}
	res := &s3Result{size: size, mcVersion: moduleVersion(b.cfg.mc), rcVersion: moduleVersion(b.cfg.rclone)}
	if res.sweep, err = s.uploadSweep(ctx); err != nil {
		return nil, err
	}
	res.best = fastest(res.sweep)
	if res.upload, err = s.uploadRace(ctx, res.best); err != nil {
		return nil, err
	}
	if res.downSweep, err = s.downloadSweep(ctx, res.best.concurrency); err != nil {
		return nil, err
	}
	res.downBest = fastest(res.downSweep)
	if res.download, err = s.downloadRace(ctx, res.downBest); err != nil {
		return nil, err
	}
	res.mcSync, res.rcSync = res.download.refs[3], res.download.refs[4]
	if res.wal, err = s.walRace(ctx); err != nil {
		return nil, err
	}
	return res, nil
}

// s3Bench is the object-store scenario's set-up.
type s3Bench struct {
	*bench
	m       *minio
	data    string // the object's bytes, an absolute path
	size    int64
	pipeEnv []string
	rcEnv   []string // rclone's: the MinIO server as remote "minio"
}

// pipeFile writes a pipeline file with MinIO's secret as a variable.
func (s *s3Bench) pipeFile(name, body string) (string, error) {
	return writePipeline(s.hcl, name, body, "secret")
}

// uploadFile writes a pipeline that uploads the data set to key, with a
// part size and a concurrency (0: pipe's defaults).
func (s *s3Bench) uploadFile(name, key string, part int64, conc int) (string, error) {
	tuning := ""
	if part > 0 {
		tuning = fmt.Sprintf("    part_size         = \"%dMiB\"\n    concurrency       = %d\n", part>>20, conc)
	}
	return s.pipeFile(name, fmt.Sprintf("  source \"fs\" {\n    path = %s\n  }\n  sink \"s3\" {\n%s    key               = %q\n%s  }\n",
		hclString(s.data), s.m.attrs(), key, tuning))
}

// downloadFile writes a pipeline that downloads pipe's upload into outDir,
// part bytes per range, conc ranges at once.
func (s *s3Bench) downloadFile(name, outDir string, part int64, conc int) (string, error) {
	return s.pipeFile(name, fmt.Sprintf("  source \"s3\" {\n%s    key               = \"up/pipe\"\n    part_size         = \"%dMiB\"\n    concurrency       = %d\n  }\n  sink \"fs\" {\n    path = %s\n  }\n",
		s.m.attrs(), part>>20, conc, hclString(outDir+"/")))
}

// object names key in the bench bucket, as mc names it.
func object(key string) string { return mcAlias + "/" + s3Bucket + "/" + key }

// uploadSweep: which part size and concurrency upload fastest here, one
// run each.
func (s *s3Bench) uploadSweep(ctx context.Context) ([]sweepPoint, error) {
	var points []sweepPoint
	for _, part := range []int64{8 << 20, 16 << 20, 32 << 20, 64 << 20} {
		for _, conc := range []int{4, 8, 16} {
			f, err := s.uploadFile(fmt.Sprintf("sweep_%d_%d", part>>20, conc), "sweep/obj", part, conc)
			if err != nil {
				return nil, err
			}
			m, err := runPipe(ctx, s.cfg.pipe, f, s.size, s.pipeEnv...)
			if err != nil {
				return nil, err
			}
			s.m.emptyTrash(ctx) // the object it overwrote
			points = append(points, sweepPoint{part, conc, m.wall})
			logf("  sweep part %3d MiB × %2d: %s", part>>20, conc, rate(s.size, m.wall))
		}
	}
	return points, nil
}

// uploadRace: pipe (the best of the sweep), mc, rclone. Each upload starts
// with its object deleted (untimed), and is checked afterwards by its size
// in the store: a tool that skipped the copy fails the benchmark instead
// of winning it.
func (s *s3Bench) uploadRace(ctx context.Context, best sweepPoint) (*race, error) {
	fBest, err := s.uploadFile("upload_best", "up/pipe", best.partSize, best.concurrency)
	if err != nil {
		return nil, err
	}
	upload := func(label, key string, run runFunc) *contender {
		return &contender{label: label, run: run,
			clean: func() {
				_, _ = timeCommand(ctx, []string{s.cfg.mc, "rm", "--quiet", object(key)}, s.m.mcEnv...)
				s.m.emptyTrash(ctx)
			},
			check: func(ctx context.Context, rep int) error {
				return storedSize(ctx, s.cfg.mc, s.m.mcEnv, object(key), s.size)
			}}
	}
	r := &race{name: "upload, one " + mib(s.size) + " object", bytes: s.size,
		pipe: upload(fmt.Sprintf("pipe (%d MiB × %d)", best.partSize>>20, best.concurrency), "up/pipe", s.pipeRun(fBest, s.size, s.pipeEnv...)),
		refs: []*contender{
			upload("mc cp", "up/mc", commands(s.m.mcEnv, []string{s.cfg.mc, "cp", "--quiet", s.data, object("up/mc")})),
			// rclone with pipe's winning part size and concurrency, as an
			// operator tunes it for large objects (its defaults: 5 MiB × 4).
			upload("rclone copyto", "up/rclone", commands(s.rcEnv, []string{s.cfg.rclone, "copyto", s.data, "minio:" + s3Bucket + "/up/rclone",
				fmt.Sprintf("--s3-chunk-size=%dMi", best.partSize>>20), fmt.Sprintf("--s3-upload-concurrency=%d", best.concurrency)})),
		}}
	return r, r.run(ctx, s.cfg.reps)
}

// downloadSweep: the download's own sweep of range sizes (a range is a
// buffer in memory until its turn comes), at the upload's concurrency.
func (s *s3Bench) downloadSweep(ctx context.Context, conc int) ([]sweepPoint, error) {
	outDir := filepath.Join(s.work, "s3-down")
	defer os.RemoveAll(outDir)
	var points []sweepPoint
	for _, part := range []int64{8 << 20, 16 << 20, 64 << 20} {
		f, err := s.downloadFile(fmt.Sprintf("down_sweep_%d", part>>20), outDir, part, conc)
		if err != nil {
			return nil, err
		}
		os.RemoveAll(outDir)
		m, err := runPipe(ctx, s.cfg.pipe, f, s.size, s.pipeEnv...)
		if err != nil {
			return nil, err
		}
		points = append(points, sweepPoint{part, conc, m.wall})
		logf("  download sweep part %3d MiB × %2d: %s", part>>20, conc, rate(s.size, m.wall))
	}
	return points, nil
}

// downloadRace downloads pipe's upload with each tool into a fresh file:
// pipe, mc, rclone, pipe with its endpoints in its own process (what the
// plugin boundary costs), then mc and rclone each followed by sync -d of
// its file, timed together: durable like pipe's, which fsyncs what it
// restores.
func (s *s3Bench) downloadRace(ctx context.Context, best sweepPoint) (*race, error) {
	outDir := filepath.Join(s.work, "s3-down")
	mcOut, rcOut := filepath.Join(s.work, "mc.down"), filepath.Join(s.work, "rclone.down")
	defer os.RemoveAll(outDir)
	defer os.Remove(mcOut)
	defer os.Remove(rcOut)
	fDown, err := s.downloadFile("download", outDir, best.partSize, best.concurrency)
	if err != nil {
		return nil, err
	}
	pipe := func(label string, env []string) *contender {
		return &contender{label: label, clean: removing(outDir), run: s.pipeRun(fDown, s.size, env...),
			check: sameAs(filepath.Join(outDir, "pipe"), s.data, s.size)}
	}
	mc := []string{s.cfg.mc, "cp", "--quiet", object("up/pipe"), mcOut}
	// rclone with as many streams as pipe's ranges in flight (its
	// default: 4).
	rc := []string{s.cfg.rclone, "copyto", "minio:" + s3Bucket + "/up/pipe", rcOut, fmt.Sprintf("--multi-thread-streams=%d", best.concurrency)}
	into := func(label, out string, target float64, env []string, cmds ...[]string) *contender {
		return &contender{label: label, target: target, clean: removing(out), run: commands(env, cmds...), check: sizeIs(out, s.size)}
	}
	r := &race{name: "download, one " + mib(s.size) + " object", bytes: s.size,
		pipe: pipe("pipe", s.pipeEnv),
		refs: []*contender{
			into("mc cp", mcOut, 0, s.m.mcEnv, mc),
			into("rclone copyto", rcOut, 0, s.rcEnv, rc),
			pipe("pipe, endpoints in-process", append(slices.Clone(s.pipeEnv), inProcess)),
			into("mc cp + sync -d", mcOut, 1.0, s.m.mcEnv, mc, []string{"sync", "-d", mcOut}),
			into("rclone copyto + sync -d", rcOut, 1.0, s.rcEnv, rc, []string{"sync", "-d", rcOut}),
		}}
	return r, r.run(ctx, s.cfg.reps)
}

// walRuns is how many times the WAL segment race runs each contender.
const walRuns = 11

// walRace uploads a 16 MiB WAL segment as whole processes, what
// archive_command pays: pipe, pipe with its endpoints in-process, mc cp;
// no warm-up and no sync between runs, as a run of archive_command.
func (s *s3Bench) walRace(ctx context.Context) (*race, error) {
	wal := filepath.Join(s.work, "000000010000000000000042")
	if err := os.WriteFile(wal, genBytes(16<<20), 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(wal)
	fWal, err := s.pipeFile("wal", fmt.Sprintf("  source \"fs\" {\n    path = %s\n  }\n  sink \"s3\" {\n%s    key               = \"wal/${stream.name}\"\n  }\n", hclString(wal), s.m.attrs()))
	if err != nil {
		return nil, err
	}
	r := &race{name: "a 16 MiB WAL segment, whole process", bytes: 16 << 20, noWarmup: true, noSync: true,
		pipe: &contender{label: "pipe", run: s.pipeRun(fWal, 16<<20, s.pipeEnv...)},
		refs: []*contender{
			{label: "pipe, endpoints in-process", run: s.pipeRun(fWal, 16<<20, append(slices.Clone(s.pipeEnv), inProcess)...)},
			{label: "mc cp", run: commands(s.m.mcEnv, []string{s.cfg.mc, "cp", "--quiet", wal, object("wal/mc")})},
		}}
	return r, r.run(ctx, walRuns)
}

// moduleVersion names a Go binary's main module and version, as `go
// version -m` reads them from the binary (mc built by `go install` reports
// no version of its own).
func moduleVersion(bin string) string {
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return filepath.Base(bin) + " (version unknown: " + err.Error() + ")"
	}
	return info.Main.Path + " " + info.Main.Version
}

// genBytes returns n bytes of the benchmark's text.
func genBytes(n int) []byte {
	var b bytes.Buffer
	_ = newPGDump(7).writeN(&b, int64(n)) // a bytes.Buffer takes every byte
	return b.Bytes()
}

// races: the upload and the download (the WAL segment's is in the table
// only).
func (r *s3Result) races() []*race { return []*race{r.upload, r.download} }

// markdown renders the object-store section.
func (r *s3Result) markdown(w writer) {
	w("\n## Object storage: MinIO (one container, same machine)\n\n")
	w("Clients: %s; %s. pipe with the part size and concurrency that won the sweep below, rclone with the same (`--s3-chunk-size`, `--s3-upload-concurrency`; as many `--multi-thread-streams` down), mc with its defaults (cp has no such setting). Upload and download move the same %s object; downloads land in a fresh file; pipe fsyncs it before it reports success and the others do not, so the durable row adds `sync -d` of the file to each of their times (pipe's download is the same run in both rows).\n\n", r.mcVersion, r.rcVersion, mb(r.size))
	w.table("scenario", "pipe", "mc", "rclone", "pipe / faster", "target", "met?")
	row := func(name string, bytes int64, pipe, mc, rc *contender) {
		pm, mm, rm := pipe.median(), mc.median(), rc.median()
		ratio := speedup(pm, min(mm, rm))
		w("| %s | %s | %s | %s | %.2f× | ≥ 1.00× | %s |\n", name, rate(bytes, pm), rate(bytes, mm), rate(bytes, rm), ratio, yesNo(ratio >= 1.0))
	}
	for _, s := range []*race{r.upload, r.download} {
		row(s.name, s.bytes, s.pipe, s.refs[0], s.refs[1])
	}
	if r.mcSync != nil && r.rcSync != nil {
		row("download, durable: each tool's time + `sync -d` of its file", r.download.bytes, r.download.pipe, r.mcSync, r.rcSync)
	}
	walPipe, walInProcess, walMC := r.wal.pipe.median(), r.wal.refs[0].median(), r.wal.refs[1].median()
	ratio := timeRatio(walPipe, walMC)
	w("| a 16 MiB WAL segment, whole process (median of %d) | %s | %s | | %.2f× of mc's wall time | ≤ 1.20× | %s |\n\n",
		len(r.wal.pipe.times), walPipe.Round(time.Millisecond), walMC.Round(time.Millisecond), ratio, yesNo(ratio <= 1.2))
	if r.mcSync != nil {
		ratio := speedup(r.download.pipe.median(), r.mcSync.median())
		w("Download against `mc cp && sync` alone (the durable copy mc users make): %.2f× (target ≥ 1.00×: %s).\n\n", ratio, yesNo(ratio >= 1.0))
	}
	w("pipe with its endpoints in its own process (`PIPE_BUILTINS=inprocess`, no plugin process): download %s, WAL segment %s. The difference is what the plugin boundary costs.\n\n",
		rate(r.download.bytes, r.download.refs[2].median()), walInProcess.Round(time.Millisecond))
	r.sweepMarkdown(w)
}

// sweepMarkdown writes the sweeps: part size × concurrency of the upload,
// range size of the download.
func (r *s3Result) sweepMarkdown(w writer) {
	w("Part size × concurrency sweep (upload of the same object, one run each):\n\n")
	w.table("part size", "4", "8", "16")
	parts := map[int64]map[int]time.Duration{}
	var keys []int64
	for _, p := range r.sweep {
		if parts[p.partSize] == nil {
			parts[p.partSize] = map[int]time.Duration{}
			keys = append(keys, p.partSize)
		}
		parts[p.partSize][p.concurrency] = p.wall
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for _, k := range keys {
		w("| %d MiB | %s | %s | %s |\n", k>>20, rate(r.size, parts[k][4]), rate(r.size, parts[k][8]), rate(r.size, parts[k][16]))
	}
	w("\nFastest: %d MiB parts × %d in flight.\n", r.best.partSize>>20, r.best.concurrency)
	if len(r.downSweep) > 0 {
		w("\nDownload range size sweep (%d ranges in flight, one run each): ", r.downBest.concurrency)
		for i, p := range r.downSweep {
			if i > 0 {
				w(", ")
			}
			w("%d MiB %s", p.partSize>>20, rate(r.size, p.wall))
		}
		w("; the download above used %d MiB.\n", r.downBest.partSize>>20)
	}
}
