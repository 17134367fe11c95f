package main

import (
	"bytes"
	"cmp"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcminio "github.com/testcontainers/testcontainers-go/modules/minio"
)

// The object-store benchmark: pipe against MinIO's own client (mc) and
// rclone, on the same MinIO container, the same 2 GiB file, interleaved.

const (
	minioImage  = "minio/minio:RELEASE.2024-01-16T16-07-38Z"
	minioUser   = "benchadmin"
	minioSecret = "bench-secret-key-42"
	s3Bucket    = "bench"
	// mcAlias names the MinIO server for mc (MC_HOST_<alias>). mc reads a
	// path whose first part is an alias as remote, so it must not be a
	// folder name the benchmark's paths start with ("bench/results/…").
	mcAlias = "pipebenchminio"
)

// s3Result is the object-store part of the report.
type s3Result struct {
	size                 int64
	upload, download     *scenarioResult
	sweep                []sweepPoint
	best                 sweepPoint
	downSweep            []sweepPoint // download, at the upload's concurrency
	downBest             sweepPoint
	mcSync, rcSync       *contender // the durable download references
	walPipe, walMC       time.Duration
	walInProcess         time.Duration // pipe with PIPE_BUILTINS=inprocess
	walRuns              int
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

// s3Tools are the reference clients; the Makefile builds them.
type s3Tools struct{ mc, rclone string }

func (b *bench) s3Scenario(ctx context.Context, tools s3Tools) (*s3Result, error) {
	logf("scenario 6: object storage against MinIO: pipe, mc, rclone")
	m, err := b.startMinIO(ctx, tools.mc)
	if err != nil {
		return nil, err
	}
	defer m.stop()
	endpoint, mcEnv := m.endpoint, m.mcEnv
	res := &s3Result{size: b.s3Size}
	rcEnv := []string{"RCLONE_CONFIG_MINIO_TYPE=s3", "RCLONE_CONFIG_MINIO_PROVIDER=Minio", "RCLONE_CONFIG_MINIO_ACCESS_KEY_ID=" + minioUser,
		"RCLONE_CONFIG_MINIO_SECRET_ACCESS_KEY=" + minioSecret, "RCLONE_CONFIG_MINIO_ENDPOINT=" + endpoint, "RCLONE_CONFIG_MINIO_REGION=us-east-1",
		"RCLONE_CONFIG=" + filepath.Join(b.work, "rclone.conf")}
	pipeEnv := []string{"PIPE_VAR_secret=" + minioSecret}
	res.mcVersion, res.rcVersion = moduleVersion(tools.mc), moduleVersion(tools.rclone)

	data, err := ensureData(b.cfg.dataDir, b.s3Size, logf)
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
	s3 := m.attrs()
	pipeFile := func(name, body string) (string, error) { return writePipeline(b.hcl, name, body, "secret") }
	upload := func(name, key string, part int64, conc int) (string, error) {
		tuning := ""
		if part > 0 {
			tuning = fmt.Sprintf("    part_size         = \"%dMiB\"\n    concurrency       = %d\n", part>>20, conc)
		}
		return pipeFile(name, fmt.Sprintf("  source \"fs\" {\n    path = %s\n  }\n  sink \"s3\" {\n%s    key               = %q\n%s  }\n",
			hclString(data), s3, key, tuning))
	}

	// The sweep: which part size and concurrency upload fastest here.
	for _, part := range []int64{8 << 20, 16 << 20, 32 << 20, 64 << 20} {
		for _, conc := range []int{4, 8, 16} {
			f, err := upload(fmt.Sprintf("sweep_%d_%d", part>>20, conc), "sweep/obj", part, conc)
			if err != nil {
				return nil, err
			}
			r, err := runPipe(ctx, b.cfg.pipe, f, b.s3Size, pipeEnv...)
			if err != nil {
				return nil, err
			}
			res.sweep = append(res.sweep, sweepPoint{part, conc, r.wall})
			logf("  sweep part %3d MiB × %2d: %s", part>>20, conc, rate(b.s3Size, r.wall))
		}
	}
	res.best = fastest(res.sweep)

	// Upload: pipe (the best of the sweep), mc, rclone.
	up := &scenarioResult{name: "upload, one " + mib(b.s3Size) + " object", bytes: b.s3Size}
	fBest, err := upload("upload_best", "up/pipe", res.best.partSize, res.best.concurrency)
	if err != nil {
		return nil, err
	}
	// Each upload starts with its object deleted (untimed), and is checked
	// afterwards by its size in the store: a tool that skipped the copy
	// fails the benchmark instead of winning it.
	uploaded := func(key string, run func(ctx context.Context) (measurement, error)) *contender {
		c := &contender{
			clean: func() {
				_, _ = timeCommand(ctx, []string{tools.mc, "rm", "--quiet", mcAlias + "/" + s3Bucket + "/" + key}, mcEnv...)
			},
			run: func(ctx context.Context, rep int) (measurement, error) {
				m, err := run(ctx)
				if err == nil {
					err = storedSize(ctx, tools.mc, mcEnv, mcAlias+"/"+s3Bucket+"/"+key, b.s3Size)
				}
				return m, err
			},
		}
		return c
	}
	up.pipe = uploaded("up/pipe", func(ctx context.Context) (measurement, error) {
		r, err := runPipe(ctx, b.cfg.pipe, fBest, b.s3Size, pipeEnv...)
		return r.measurement, err
	})
	up.pipe.label = fmt.Sprintf("pipe (%d MiB × %d)", res.best.partSize>>20, res.best.concurrency)
	mcUp := uploaded("up/mc", func(ctx context.Context) (measurement, error) {
		return timeCommand(ctx, []string{tools.mc, "cp", "--quiet", data, mcAlias + "/" + s3Bucket + "/up/mc"}, mcEnv...)
	})
	mcUp.label = "mc cp"
	rcUp := uploaded("up/rclone", func(ctx context.Context) (measurement, error) {
		return timeCommand(ctx, []string{tools.rclone, "copyto", data, "minio:" + s3Bucket + "/up/rclone"}, rcEnv...)
	})
	rcUp.label = "rclone copyto"
	up.refs = []*contender{mcUp, rcUp}
	if err := up.interleave(ctx, b.cfg.reps); err != nil {
		return nil, err
	}
	res.upload = up

	// Download the same object with each tool into a fresh file.
	down := &scenarioResult{name: "download, one " + mib(b.s3Size) + " object", bytes: b.s3Size}
	outDir := filepath.Join(b.work, "s3-down")
	download := func(name string, part int64, conc int) (string, error) {
		return pipeFile(name, fmt.Sprintf("  source \"s3\" {\n%s    key               = \"up/pipe\"\n    part_size         = \"%dMiB\"\n    concurrency       = %d\n  }\n  sink \"fs\" {\n    path = %s\n  }\n",
			s3, part>>20, conc, hclString(outDir+"/")))
	}
	// The download's own sweep of range sizes (a range is a buffer in
	// memory until its turn comes), at the upload's concurrency.
	for _, part := range []int64{8 << 20, 16 << 20, 64 << 20} {
		f, err := download(fmt.Sprintf("down_sweep_%d", part>>20), part, res.best.concurrency)
		if err != nil {
			return nil, err
		}
		os.RemoveAll(outDir)
		r, err := runPipe(ctx, b.cfg.pipe, f, b.s3Size, pipeEnv...)
		if err != nil {
			return nil, err
		}
		res.downSweep = append(res.downSweep, sweepPoint{part, res.best.concurrency, r.wall})
		logf("  download sweep part %3d MiB × %2d: %s", part>>20, res.best.concurrency, rate(b.s3Size, r.wall))
	}
	os.RemoveAll(outDir)
	res.downBest = fastest(res.downSweep)
	fDown, err := download("download", res.downBest.partSize, res.downBest.concurrency)
	if err != nil {
		return nil, err
	}
	check := func(p string) error {
		_, err := checkSize(p, b.s3Size)
		return err
	}
	// pipe, and pipe with its endpoints in its own process (what the
	// plugin boundary costs), into the same folder.
	pipeDown := func(label string, env []string) *contender {
		c := &contender{label: label, clean: func() { os.RemoveAll(outDir) }}
		c.run = func(ctx context.Context, rep int) (measurement, error) {
			r, err := runPipe(ctx, b.cfg.pipe, fDown, b.s3Size, env...)
			if err != nil {
				return r.measurement, err
			}
			if rep == 0 {
				return r.measurement, sameFile(filepath.Join(outDir, "pipe"), data)
			}
			return r.measurement, check(filepath.Join(outDir, "pipe"))
		}
		return c
	}
	down.pipe = pipeDown("pipe", pipeEnv)
	mcOut, rcOut := filepath.Join(b.work, "mc.down"), filepath.Join(b.work, "rclone.down")
	down.refs = []*contender{
		{label: "mc cp", clean: func() { os.Remove(mcOut) }, run: func(ctx context.Context, rep int) (measurement, error) {
			m, err := timeCommand(ctx, []string{tools.mc, "cp", "--quiet", mcAlias + "/" + s3Bucket + "/up/pipe", mcOut}, mcEnv...)
			if err == nil {
				err = check(mcOut)
			}
			return m, err
		}},
		{label: "rclone copyto", clean: func() { os.Remove(rcOut) }, run: func(ctx context.Context, rep int) (measurement, error) {
			m, err := timeCommand(ctx, []string{tools.rclone, "copyto", "minio:" + s3Bucket + "/up/pipe", rcOut}, rcEnv...)
			if err == nil {
				err = check(rcOut)
			}
			return m, err
		}},
		pipeDown("pipe, endpoints in-process", append(pipeEnv[:len(pipeEnv):len(pipeEnv)], inProcess)),
	}
	// Durable like pipe's: each reference followed by sync -d of its file,
	// timed together (pipe fsyncs what it restores).
	res.mcSync = refContender("mc cp + sync -d", 1.0, mcOut, b.s3Size, mcEnv, []string{tools.mc, "cp", "--quiet", mcAlias + "/" + s3Bucket + "/up/pipe", mcOut}, []string{"sync", "-d", mcOut})
	res.rcSync = refContender("rclone copyto + sync -d", 1.0, rcOut, b.s3Size, rcEnv, []string{tools.rclone, "copyto", "minio:" + s3Bucket + "/up/pipe", rcOut}, []string{"sync", "-d", rcOut})
	down.refs = append(down.refs, res.mcSync, res.rcSync)
	err = down.interleave(ctx, b.cfg.reps)
	os.RemoveAll(outDir)
	os.Remove(mcOut)
	os.Remove(rcOut)
	if err != nil {
		return nil, err
	}
	res.download = down

	// A 16 MiB WAL segment, as whole processes: what archive_command pays.
	wal := filepath.Join(b.work, "000000010000000000000042")
	if err := os.WriteFile(wal, genBytes(16<<20), 0o600); err != nil {
		return nil, err
	}
	defer os.Remove(wal)
	fWal, err := pipeFile("wal", fmt.Sprintf("  source \"fs\" {\n    path = %s\n  }\n  sink \"s3\" {\n%s    key               = \"wal/${stream.name}\"\n  }\n", hclString(wal), s3))
	if err != nil {
		return nil, err
	}
	var pw, iw, mw []time.Duration
	res.walRuns = 11
	for i := 0; i < res.walRuns; i++ {
		r, err := runPipe(ctx, b.cfg.pipe, fWal, 16<<20, pipeEnv...)
		if err != nil {
			return nil, err
		}
		pw = append(pw, r.wall)
		if r, err = runPipe(ctx, b.cfg.pipe, fWal, 16<<20, append(pipeEnv[:len(pipeEnv):len(pipeEnv)], inProcess)...); err != nil {
			return nil, err
		}
		iw = append(iw, r.wall)
		m, err := timeCommand(ctx, []string{tools.mc, "cp", "--quiet", wal, mcAlias + "/" + s3Bucket + "/wal/mc"}, mcEnv...)
		if err != nil {
			return nil, err
		}
		mw = append(mw, m.wall)
	}
	res.walPipe, res.walInProcess, res.walMC = median(pw), median(iw), median(mw)
	return res, nil
}

// minio is the MinIO container the object-store scenarios run against,
// with its bucket made.
type minio struct {
	endpoint string   // http://host:port
	mcEnv    []string // mc's environment: the server as mcAlias
	stop     func()
	c        testcontainers.Container
	config   string // mc's configuration folder
}

// at points pipe and mc at MinIO's host:port.
func (m *minio) at(hostPort string) {
	m.endpoint = "http://" + hostPort
	m.mcEnv = []string{"MC_HOST_" + mcAlias + "=http://" + minioUser + ":" + minioSecret + "@" + hostPort, "MC_CONFIG_DIR=" + m.config}
}

// direct points pipe and mc at the container's own address, bypassing
// docker-proxy (see directAddr), when the host can reach it.
func (m *minio) direct(ctx context.Context) bool {
	host, port, ok := directAddr(ctx, m.c, "9000/tcp")
	if ok {
		m.at(net.JoinHostPort(host, port))
	}
	return ok
}

// emptier returns a contender's clean: it removes what the bench bucket
// holds under prefix, untimed.
func (m *minio) emptier(ctx context.Context, mc, prefix string) func() {
	return func() {
		_, _ = timeCommand(ctx, []string{mc, "rm", "--recursive", "--force", "--quiet", mcAlias + "/" + s3Bucket + "/" + prefix}, m.mcEnv...)
	}
}

func (b *bench) startMinIO(ctx context.Context, mc string) (*minio, error) {
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		if _, err := os.Stat("/.dockerenv"); err == nil {
			os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "localhost")
		}
	}
	c, err := tcminio.Run(ctx, minioImage, tcminio.WithUsername(minioUser), tcminio.WithPassword(minioSecret))
	stop := func() {
		if c != nil {
			testcontainers.TerminateContainer(c)
		}
	}
	if err != nil {
		stop()
		return nil, fmt.Errorf("starting MinIO (docker and ../shared/testimages/build.sh): %w", err)
	}
	hostPort, err := c.ConnectionString(ctx)
	if err != nil {
		stop()
		return nil, err
	}
	m := &minio{stop: stop, c: c, config: filepath.Join(b.work, "mc-config")}
	m.at(hostPort)
	if _, err := timeCommand(ctx, []string{mc, "mb", mcAlias + "/" + s3Bucket}, m.mcEnv...); err != nil {
		stop()
		return nil, err
	}
	return m, nil
}

// attrs are an s3 block's attributes for the bench bucket; the secret key
// is the sensitive variable "secret".
func (m *minio) attrs() string {
	return fmt.Sprintf(`    bucket            = %q
    endpoint          = %q
    region            = "us-east-1"
    path_style        = true
    access_key_id     = %q
    secret_access_key = var.secret
`, s3Bucket, m.endpoint, minioUser)
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

// markdown renders the object-store section.
func (r *s3Result) markdown(w func(string, ...any)) {
	w("\n## Object storage: MinIO (one container, same machine)\n\n")
	w("Clients: %s; %s. Each tool with its own defaults; pipe with the part size and concurrency that won the sweep below. Upload and download move the same %s object; downloads land in a fresh file; pipe fsyncs it before it reports success and the others do not, so the durable row adds `sync -d` of the file to each of their times (pipe's download is the same run in both rows).\n\n", r.mcVersion, r.rcVersion, mb(r.size))
	w("| scenario | pipe | mc | rclone | pipe / faster | target | met? |\n|---|---|---|---|---|---|---|\n")
	for _, s := range []*scenarioResult{r.upload, r.download} {
		pm := median(s.pipe.times)
		mc, rc := median(s.refs[0].times), median(s.refs[1].times)
		faster := min(mc, rc)
		ratio := float64(faster) / float64(pm)
		w("| %s | %s | %s | %s | %.2f× | ≥ 1.00× | %s |\n", s.name, rate(s.bytes, pm), rate(s.bytes, mc), rate(s.bytes, rc), ratio, yesNo(ratio >= 1.0))
	}
	ratio := float64(r.walPipe) / float64(r.walMC)
	d := r.download
	if r.mcSync != nil && r.rcSync != nil {
		pm := median(d.pipe.times)
		mc, rc := median(r.mcSync.times), median(r.rcSync.times)
		ratio := float64(min(mc, rc)) / float64(pm)
		w("| download, durable: each tool's time + `sync -d` of its file | %s | %s | %s | %.2f× | ≥ 1.00× | %s |\n", rate(d.bytes, pm), rate(d.bytes, mc), rate(d.bytes, rc), ratio, yesNo(ratio >= 1.0))
	}
	w("| a 16 MiB WAL segment, whole process (median of %d) | %s | %s | | %.2f× of mc's wall time | ≤ 1.20× | %s |\n\n",
		r.walRuns, r.walPipe.Round(time.Millisecond), r.walMC.Round(time.Millisecond), ratio, yesNo(ratio <= 1.2))
	w("pipe with its endpoints in its own process (`PIPE_BUILTINS=inprocess`, no plugin process): download %s, WAL segment %s. The difference is what the plugin boundary costs.\n\n",
		rate(r.download.bytes, median(r.download.refs[2].times)), r.walInProcess.Round(time.Millisecond))
	w("Part size × concurrency sweep (upload of the same object, one run each):\n\n| part size | 4 | 8 | 16 |\n|---|---|---|---|\n")
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

// storedSize checks that the object at path (alias/bucket/key) holds size
// bytes, asking the store with mc.
func storedSize(ctx context.Context, mc string, env []string, path string, size int64) error {
	m, err := timeCommand(ctx, []string{mc, "stat", "--json", path}, env...)
	if err != nil {
		return fmt.Errorf("mc stat %s: %w", path, err)
	}
	var st struct {
		Size int64 `json:"size"`
	}
	// mc prints one JSON value per line; the first is the object's.
	if err := json.NewDecoder(bytes.NewReader(m.stdout)).Decode(&st); err != nil {
		return fmt.Errorf("mc stat %s: %w", path, err)
	}
	if st.Size != size {
		return fmt.Errorf("%s holds %d bytes, want %d", path, st.Size, size)
	}
	return nil
}
