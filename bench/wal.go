package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcminio "github.com/testcontainers/testcontainers-go/modules/minio"
	"github.com/testcontainers/testcontainers-go/wait"
)

// The WAL archiving scenario (issue: PostgreSQL continuous archiving):
// pipe wal push and fetch against pgBackRest and barman-cloud, on the
// segments of one PostgreSQL 15 server on this host, into one MinIO that
// serves TLS (pgBackRest's S3 repository speaks nothing else).
//
// PostgreSQL's archiver is played by the harness: for each segment, in
// order, it runs the tool's archive_command in the data directory and,
// when it exits 0, renames archive_status/<segment>.ready to .done, as
// PostgreSQL does; the time until the last command returns is the time
// until all are archived. Recovery is played the same way: the
// restore_command of each segment in order, into pg_wal/RECOVERYXLOG,
// which is then consumed.

// walBench is the scenario's set-up: the server, its segments, MinIO and
// the environment of each tool.
type walBench struct {
	b        *bench
	dir      string // a folder the postgres user owns: data, spools, configs
	pgdata   string
	segs     []string // completed segments in pg_wal, oldest first
	port     int      // PostgreSQL's
	endpoint string   // https://localhost:port
	hostPort string
	cert     string // MinIO's certificate, trusted by every client
	mc       string
	mcEnv    []string
	stop     func()
	// stopMinIO ends the MinIO container.
	stopMinIO func()
	// osUser runs the tools as PostgreSQL runs its commands: as postgres
	// when the harness is root.
	osUser string
}

// walResult is the scenario's outcome.
type walResult struct {
	segments          int
	segSize           int64
	single            *race // one segment, whole process, sync
	burst             *race // n segments through the archiver loop
	fetch             *race // n segments through the recovery loop
	pipeRSS, budget   int64
	phases            []walPhase // every burst and fetch run, monitored
	versions          []string
	compressed        map[string]int64 // stored bytes of the burst, by tool
	pgbackrestWorkers int
}

const (
	walPGUser   = "postgres"
	walStanza   = "bench"
	walBarmanID = "bench"
)

func (b *bench) walScenario(ctx context.Context) (*walResult, error) {
	mc := b.cfg.mc
	n := 256
	if b.cfg.quick {
		n = 32
	}
	logf("scenario: WAL archiving: pipe wal vs pgBackRest and barman-cloud, %d segments of 16 MiB", n)
	for _, tool := range []string{"pgbackrest", "barman-cloud-wal-archive", "barman-cloud-wal-restore", "initdb", "pg_ctl", "pgbench"} {
		if _, err := lookPG(tool); err != nil {
			return nil, fmt.Errorf("%s is not installed: apt-get install pgbackrest barman-cli-cloud postgresql-15", tool)
		}
	}
	// archive_command is pipe-wal, which answers for a file the pusher
	// or an earlier push noted without starting pipe.
	pipeWAL := filepath.Join(filepath.Dir(b.cfg.pipe), "pipe-wal")
	if _, err := os.Stat(pipeWAL); err != nil {
		return nil, fmt.Errorf("pipe-wal is not beside %s: make build writes both", b.cfg.pipe)
	}
	w, err := b.newWALBench(ctx, mc, n+16)
	if err != nil {
		return nil, err
	}
	defer w.stop()
	res := &walResult{segments: n, segSize: 16 << 20, compressed: map[string]int64{}, pgbackrestWorkers: 2}
	res.versions = w.versions(ctx)

	// pipe's async archive twice: with a background pusher and
	// prefetcher (background = "always": this VM's PID 1 reaps orphans,
	// as systemd does on a server), and without (the official image's
	// way, where nothing outlives the command PostgreSQL runs).
	pipeFile := filepath.Join(w.dir, "pipe.hcl")
	pipeAsync := filepath.Join(w.dir, "pipe-async.hcl")
	pipeInCmd := filepath.Join(w.dir, "pipe-incommand.hcl")
	for file, a := range map[string]struct {
		async bool
		bg    string
	}{pipeFile: {false, "auto"}, pipeAsync: {true, "always"}, pipeInCmd: {true, "never"}} {
		if err := os.WriteFile(file, []byte(w.pipeArchive(a.async, a.bg)), 0o644); err != nil {
			return nil, err
		}
	}
	if res.budget, err = w.pipeBudget(ctx, pipeAsync); err != nil {
		return nil, err
	}
	if err := w.pgbackrest(ctx, false, "stanza-create"); err != nil {
		return nil, err
	}

	// One segment, sync, whole process: a different segment each run
	// (a second push of the same one would be a no-op for every tool).
	single := &race{name: "push one 16 MiB segment, sync (whole process)", bytes: res.segSize}
	seg := func(rep int) string { return "pg_wal/" + w.segs[rep] }
	single.pipe = &contender{label: "pipe wal push", clean: w.cleaner(ctx, "pipe"), run: func(ctx context.Context, rep int) (measurement, error) {
		return w.run(ctx, w.pipeEnv(), w.b.cfg.pipe, "wal", "push", pipeFile, seg(rep))
	}}
	single.refs = []*contender{
		{label: "pgbackrest archive-push", target: 1, clean: w.cleaner(ctx, "pgbackrest"), run: func(ctx context.Context, rep int) (measurement, error) {
			return w.run(ctx, w.pgbackrestEnv(false), "pgbackrest", "--stanza="+walStanza, "archive-push", seg(rep))
		}},
		{label: "barman-cloud-wal-archive", clean: w.cleaner(ctx, "barman"), run: func(ctx context.Context, rep int) (measurement, error) {
			return w.run(ctx, w.barmanEnv(), "barman-cloud-wal-archive", "-z", "--endpoint-url", w.endpoint, "s3://barman/wal", walBarmanID, seg(rep))
		}},
	}
	singleReps := max(b.cfg.reps*2+1, 5)
	if err := single.run(ctx, min(singleReps, 15)); err != nil {
		return nil, err
	}
	res.single = single

	// A burst: n segments ready at once, through the archiver loop.
	burstSegs := w.segs[16 : 16+n]
	burst := &race{name: fmt.Sprintf("a burst of %d segments (%s of WAL), until all are archived", n, mib(int64(n)*res.segSize)), bytes: int64(n) * res.segSize, noWarmup: true}
	burst.pipe = &contender{label: "pipe-wal (async, 4 workers, background pusher)", clean: w.burstCleaner(ctx, "pipe", burstSegs), run: func(ctx context.Context, rep int) (measurement, error) {
		m, err := w.watch(res, "burst", "pipe", rep, func() (measurement, error) {
			return w.archiver(ctx, burstSegs, w.pipeEnv(), pipeWAL, "push", pipeAsync)
		})
		res.compressed["pipe"] = w.stored(ctx, "pipe")
		return m, err
	}}
	burst.refs = []*contender{
		{label: "pgBackRest (async, process-max 2)", target: 1.2, clean: w.burstCleaner(ctx, "pgbackrest", burstSegs), run: func(ctx context.Context, rep int) (measurement, error) {
			m, err := w.watch(res, "burst", "pgbackrest", rep, func() (measurement, error) {
				return w.archiver(ctx, burstSegs, w.pgbackrestEnv(true), "pgbackrest", "--stanza="+walStanza, "archive-push")
			})
			res.compressed["pgbackrest"] = w.stored(ctx, "pgbackrest")
			return m, err
		}},
		{label: "barman-cloud-wal-archive", target: 1.2, clean: w.burstCleaner(ctx, "barman", burstSegs), run: func(ctx context.Context, rep int) (measurement, error) {
			m, err := w.watch(res, "burst", "barman", rep, func() (measurement, error) {
				return w.archiver(ctx, burstSegs, w.barmanEnv(), "barman-cloud-wal-archive", "-z", "--endpoint-url", w.endpoint, "s3://barman/wal", walBarmanID)
			})
			res.compressed["barman"] = w.stored(ctx, "barman")
			return m, err
		}},
	}
	burst.refs = append(burst.refs, &contender{label: "pipe-wal (async, 4 workers, in archive_command)", clean: w.burstCleaner(ctx, "pipe", burstSegs), run: func(ctx context.Context, rep int) (measurement, error) {
		m, err := w.watch(res, "burst", "pipe-incommand", rep, func() (measurement, error) {
			return w.archiver(ctx, burstSegs, w.pipeEnv(), pipeWAL, "push", pipeInCmd)
		})
		res.pipeRSS = max(res.pipeRSS, m.maxRSS)
		return m, err
	}})
	burst.notes = append(burst.notes, "the harness plays PostgreSQL's archiver: one archive_command per segment, in order, each waited for; pipe pushes ahead (async = true, workers = 4) by a background pusher (background = \"always\"; archive_command is pipe-wal push), and, in its second row, each archive_command sends its own and the next ready files (background = \"never\", what the official postgres image gets; archive_command is pipe-wal push, which answers for the files an earlier command sent); pgBackRest runs its async process (archive-async, process-max = 2), barman-cloud-wal-archive has no async mode")
	if err := burst.run(ctx, min(b.cfg.reps, 3)); err != nil {
		return nil, err
	}
	res.burst = burst

	// Recovery: the same segments, fetched in order as restore_command.
	// Every tool's archive holds them from the burst.
	restoreDir := filepath.Join(w.dir, "restore")
	fetch := &race{name: fmt.Sprintf("fetch %d segments in order, as restore_command during recovery", n), bytes: int64(n) * res.segSize, noWarmup: true}
	fetch.pipe = &contender{label: "pipe (prefetch 8, background prefetcher)", clean: w.restoreCleaner(restoreDir), run: func(ctx context.Context, rep int) (measurement, error) {
		return w.watch(res, "fetch", "pipe", rep, func() (measurement, error) {
			return w.recovery(ctx, restoreDir, burstSegs, w.pipeEnv(), w.b.cfg.pipe, "wal", "fetch", pipeAsync)
		})
	}}
	fetch.refs = []*contender{
		{label: "pgBackRest (async archive-get)", target: 1.2, clean: w.restoreCleaner(restoreDir), run: func(ctx context.Context, rep int) (measurement, error) {
			env := append(w.pgbackrestEnv(true), "PGBACKREST_PG1_PATH="+restoreDir)
			return w.watch(res, "fetch", "pgbackrest", rep, func() (measurement, error) {
				return w.recovery(ctx, restoreDir, burstSegs, env, "pgbackrest", "--stanza="+walStanza, "archive-get")
			})
		}},
		{label: "barman-cloud-wal-restore", target: 1.2, clean: w.restoreCleaner(restoreDir), run: func(ctx context.Context, rep int) (measurement, error) {
			return w.watch(res, "fetch", "barman", rep, func() (measurement, error) {
				return w.recovery(ctx, restoreDir, burstSegs, w.barmanEnv(), "barman-cloud-wal-restore", "--endpoint-url", w.endpoint, "s3://barman/wal", walBarmanID)
			})
		}},
	}
	fetch.refs = append(fetch.refs, &contender{label: "pipe (prefetch 8, in restore_command)", clean: w.restoreCleaner(restoreDir), run: func(ctx context.Context, rep int) (measurement, error) {
		return w.watch(res, "fetch", "pipe-incommand", rep, func() (measurement, error) {
			return w.recovery(ctx, restoreDir, burstSegs, w.pipeEnv(), w.b.cfg.pipe, "wal", "fetch", pipeInCmd)
		})
	}})
	fetch.notes = append(fetch.notes, "the harness plays recovery: one restore_command per segment, in order, into pg_wal/RECOVERYXLOG, which it then checks and removes; pipe prefetches 8 segments (prefetch = 8) by a background prefetcher (background = \"always\"), and, in its second row, restore_command fetches the next 8 itself when half are not spooled (background = \"never\"); pgBackRest's async archive-get queues 128 MiB (8 segments)")
	if err := fetch.run(ctx, min(b.cfg.reps, 3)); err != nil {
		return nil, err
	}
	res.fetch = fetch
	return res, nil
}

// lookPG finds a tool on PATH or among PostgreSQL 15's binaries.
func lookPG(tool string) (string, error) {
	if p, err := exec.LookPath(tool); err == nil {
		return p, nil
	}
	p := filepath.Join("/usr/lib/postgresql/15/bin", tool)
	if _, err := os.Stat(p); err != nil {
		return "", err
	}
	return p, nil
}

// newWALBench initdb's a server, writes need segments of WAL, and starts
// MinIO with TLS.
func (b *bench) newWALBench(ctx context.Context, mc string, need int) (*walBench, error) {
	w := &walBench{b: b, mc: mc, port: 55432}
	if os.Geteuid() == 0 {
		w.osUser = walPGUser
		if _, err := user.Lookup(walPGUser); err != nil {
			return nil, fmt.Errorf("the harness runs as root and there is no %s user to run PostgreSQL as: %w", walPGUser, err)
		}
	}
	var err error
	// Under /tmp, where the postgres user can reach it (the work folder
	// is private to root); the same disk here.
	if w.dir, err = os.MkdirTemp("", "pipe-bench-wal-"); err != nil {
		return nil, err
	}
	var stops []func()
	w.stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		os.RemoveAll(w.dir)
	}
	fail := func(err error) (*walBench, error) {
		w.stop()
		return nil, err
	}
	if err := os.Chmod(w.dir, 0o755); err != nil {
		return fail(err)
	}
	if err := w.chown(w.dir); err != nil {
		return fail(err)
	}
	w.pgdata = filepath.Join(w.dir, "pgdata")
	initdb, _ := lookPG("initdb")
	pgctl, _ := lookPG("pg_ctl")
	if _, err := w.run(ctx, nil, initdb, "-D", w.pgdata, "-A", "trust", "-U", walPGUser); err != nil {
		return fail(fmt.Errorf("initdb: %w", err))
	}
	if _, err := w.run(ctx, nil, pgctl, "-D", w.pgdata, "-l", filepath.Join(w.dir, "pg.log"), "-o", w.serverOpts(), "-w", "start"); err != nil {
		log, _ := os.ReadFile(filepath.Join(w.dir, "pg.log"))
		return fail(fmt.Errorf("starting PostgreSQL: %w\n%s", err, log))
	}
	stops = append(stops, func() { _, _ = w.run(context.Background(), nil, pgctl, "-D", w.pgdata, "-m", "immediate", "stop") })
	if err := w.makeWAL(ctx, need); err != nil {
		return fail(err)
	}
	if err := w.startMinIO(ctx); err != nil {
		return fail(err)
	}
	stops = append(stops, w.minioStop)
	return w, nil
}

// serverOpts are the server's settings on pg_ctl's command line: a Unix
// socket only, no archiving (the harness plays the archiver), WAL kept.
func (w *walBench) serverOpts() string {
	return fmt.Sprintf("-c port=%d -c listen_addresses='' -c unix_socket_directories=%s -c archive_mode=off -c wal_keep_size=16GB -c max_wal_size=16GB -c checkpoint_timeout=1h -c fsync=off -c full_page_writes=on",
		w.port, w.dir)
}

func (w *walBench) minioStop() {
	if w.stopMinIO != nil {
		w.stopMinIO()
	}
}

// chown gives a path to the postgres user when the harness is root.
func (w *walBench) chown(p string) error {
	if w.osUser == "" {
		return nil
	}
	u, err := user.Lookup(w.osUser)
	if err != nil {
		return err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return os.Chown(p, uid, gid)
}

// run times a command as PostgreSQL would run it: as its user, in its
// data directory, with env.
func (w *walBench) run(ctx context.Context, env []string, argv ...string) (measurement, error) {
	return w.runIn(ctx, w.pgdata, env, argv...)
}

func (w *walBench) runIn(ctx context.Context, dir string, env []string, argv ...string) (measurement, error) {
	if w.osUser != "" {
		// runuser keeps the environment it is given.
		argv = append([]string{"runuser", "-u", w.osUser, "--"}, argv...)
	}
	if _, err := os.Stat(dir); err != nil {
		dir = w.dir
	}
	m, err := runCommandIn(ctx, dir, argv, false, env...)
	if err != nil {
		return m, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return m, nil
}

// psql runs SQL on the server and returns its output.
func (w *walBench) psql(ctx context.Context, sql string) (string, error) {
	psql, err := lookPG("psql")
	if err != nil {
		return "", err
	}
	m, err := w.run(ctx, nil, psql, "-X", "-A", "-t", "-h", w.dir, "-p", strconv.Itoa(w.port), "-U", walPGUser, "-d", "postgres", "-c", sql)
	return strings.TrimSpace(string(m.stdout)), err
}

// makeWAL writes WAL until pg_wal holds need completed segments: pgbench
// initialisations (tables, indexes, checkpoints' full-page images) until
// then.
func (w *walBench) makeWAL(ctx context.Context, need int) error {
	pgbench, _ := lookPG("pgbench")
	start := time.Now()
	for {
		segs, err := w.completed()
		if err != nil {
			return err
		}
		if len(segs) >= need {
			w.segs = segs[len(segs)-need:]
			logf("  %d segments of WAL written in %s", len(segs), time.Since(start).Round(time.Second))
			return nil
		}
		if _, err := w.run(ctx, nil, pgbench, "-h", w.dir, "-p", strconv.Itoa(w.port), "-U", walPGUser, "-i", "-q", "-s", "40", "postgres"); err != nil {
			return fmt.Errorf("pgbench: %w", err)
		}
		if _, err := w.psql(ctx, "CHECKPOINT"); err != nil {
			return err
		}
		if _, err := w.psql(ctx, "SELECT pg_switch_wal()"); err != nil {
			return err
		}
	}
}

// completed lists pg_wal's segments before the current one.
func (w *walBench) completed() ([]string, error) {
	cur, err := w.psql(context.Background(), "SELECT pg_walfile_name(pg_current_wal_lsn())")
	if err != nil {
		return nil, err
	}
	ents, err := os.ReadDir(filepath.Join(w.pgdata, "pg_wal"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if n := e.Name(); len(n) == 24 && n < cur {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	// Only an unbroken run: recycled segments ahead of the current one
	// are not completed WAL.
	return out, nil
}

// startMinIO starts MinIO with a self-signed certificate for localhost
// and makes a bucket per tool.
func (w *walBench) startMinIO(ctx context.Context) error {
	certDir := filepath.Join(w.dir, "certs")
	if err := os.MkdirAll(certDir, 0o755); err != nil {
		return err
	}
	crt, key, err := selfSigned()
	if err != nil {
		return err
	}
	w.cert = filepath.Join(certDir, "public.crt")
	if err := os.WriteFile(w.cert, crt, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(certDir, "private.key"), key, 0o644); err != nil {
		return err
	}
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		if _, err := os.Stat("/.dockerenv"); err == nil {
			os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "localhost")
		}
	}
	c, err := tcminio.Run(ctx, minioImage, tcminio.WithUsername(minioUser), tcminio.WithPassword(minioSecret),
		testcontainers.WithFiles(
			testcontainers.ContainerFile{HostFilePath: w.cert, ContainerFilePath: "/certs/public.crt", FileMode: 0o644},
			testcontainers.ContainerFile{HostFilePath: filepath.Join(certDir, "private.key"), ContainerFilePath: "/certs/private.key", FileMode: 0o644}),
		testcontainers.WithCmdArgs("--certs-dir", "/certs"),
		testcontainers.WithWaitStrategy(wait.ForListeningPort("9000/tcp")))
	w.stopMinIO = func() {
		if c != nil {
			_ = testcontainers.TerminateContainer(c) // the bench is over
		}
	}
	if err != nil {
		return fmt.Errorf("starting MinIO with TLS: %w", err)
	}
	hp, err := c.ConnectionString(ctx)
	if err != nil {
		return err
	}
	_, port, _ := net.SplitHostPort(hp)
	w.hostPort = "localhost:" + port
	w.endpoint = "https://" + w.hostPort
	w.mcEnv = []string{"MC_HOST_" + mcAlias + "=https://" + minioUser + ":" + minioSecret + "@" + w.hostPort,
		"MC_CONFIG_DIR=" + filepath.Join(w.dir, "mc-config"), "SSL_CERT_FILE=" + w.cert}
	deadline := time.Now().Add(30 * time.Second)
	for _, bucket := range []string{"pipe", "pgbackrest", "barman"} {
		for {
			_, err := timeCommand(ctx, []string{w.mc, "mb", mcAlias + "/" + bucket}, w.mcEnv...)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				return err
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	return nil
}

// selfSigned makes a certificate for localhost and 127.0.0.1, its own CA.
func selfSigned() (crt, key []byte, err error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		return nil, nil, err
	}
	kd, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kd}), nil
}

// pipeArchive is pipe's archive file: zstd level 3, as pgBackRest's.
func (w *walBench) pipeArchive(async bool, background string) string {
	return fmt.Sprintf(`variable "secret" { sensitive = true }
archive "bench" {
  store "s3" {
    bucket            = "pipe"
    key               = "wal/"
    endpoint          = %q
    region            = "us-east-1"
    path_style        = true
    access_key_id     = %q
    secret_access_key = var.secret
  }
  compress {
    codec = "zstd"
    level = 3
  }
  background = %q
  push {
    async   = %t
    workers = 4
    spool   = %q
  }
  fetch {
    prefetch = 8
  }
}
`, w.endpoint, minioUser, background, async, filepath.Join(w.dir, "pipe-spool"))
}

func (w *walBench) pipeEnv() []string {
	return []string{"PIPE_VAR_secret=" + minioSecret, "AWS_CA_BUNDLE=" + w.cert}
}

// pipeBudget is the memory budget pipe plan prints for the archive.
func (w *walBench) pipeBudget(ctx context.Context, file string) (int64, error) {
	m, err := w.run(ctx, w.pipeEnv(), w.b.cfg.pipe, "plan", file, "--json")
	if err != nil {
		return 0, err
	}
	var plan struct {
		Archives []struct {
			Memory map[string]int64 `json:"memory"`
		} `json:"archives"`
	}
	if err := json.Unmarshal(m.stdout, &plan); err != nil || len(plan.Archives) != 1 {
		return 0, fmt.Errorf("pipe plan --json: %v\n%s", err, m.stdout)
	}
	return plan.Archives[0].Memory["budget"], nil
}

// pgbackrestEnv configures pgBackRest through its environment: the S3
// repository with zstd level 3, async or not.
func (w *walBench) pgbackrestEnv(async bool) []string {
	_, port, _ := net.SplitHostPort(w.hostPort)
	return []string{
		"PGBACKREST_STANZA=" + walStanza, "PGBACKREST_PG1_PATH=" + w.pgdata, "PGBACKREST_PG1_PORT=" + strconv.Itoa(w.port),
		"PGBACKREST_PG1_SOCKET_PATH=" + w.dir, "PGBACKREST_PG1_USER=" + walPGUser,
		"PGBACKREST_REPO1_TYPE=s3", "PGBACKREST_REPO1_PATH=/repo", "PGBACKREST_REPO1_S3_BUCKET=pgbackrest",
		"PGBACKREST_REPO1_S3_ENDPOINT=localhost", "PGBACKREST_REPO1_STORAGE_PORT=" + port, "PGBACKREST_REPO1_S3_REGION=us-east-1",
		"PGBACKREST_REPO1_S3_URI_STYLE=path", "PGBACKREST_REPO1_STORAGE_CA_FILE=" + w.cert,
		"PGBACKREST_REPO1_S3_KEY=" + minioUser, "PGBACKREST_REPO1_S3_KEY_SECRET=" + minioSecret,
		"PGBACKREST_COMPRESS_TYPE=zst", "PGBACKREST_COMPRESS_LEVEL=3",
		"PGBACKREST_ARCHIVE_ASYNC=" + map[bool]string{true: "y", false: "n"}[async], "PGBACKREST_PROCESS_MAX=2",
		"PGBACKREST_SPOOL_PATH=" + filepath.Join(w.dir, "pgbackrest-spool"), "PGBACKREST_LOCK_PATH=" + filepath.Join(w.dir, "pgbackrest-lock"),
		"PGBACKREST_LOG_PATH=" + filepath.Join(w.dir, "pgbackrest-log"), "PGBACKREST_LOG_LEVEL_CONSOLE=warn", "PGBACKREST_LOG_LEVEL_FILE=off",
		"PGBACKREST_LOG_LEVEL_STDERR=warn",
	}
}

func (w *walBench) pgbackrest(ctx context.Context, async bool, args ...string) error {
	_, err := w.run(ctx, w.pgbackrestEnv(async), append([]string{"pgbackrest"}, args...)...)
	return err
}

// barmanEnv gives barman-cloud its credentials and trust in the
// certificate.
func (w *walBench) barmanEnv() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + minioUser, "AWS_SECRET_ACCESS_KEY=" + minioSecret, "AWS_DEFAULT_REGION=us-east-1",
		"AWS_CA_BUNDLE=" + w.cert, "AWS_EC2_METADATA_DISABLED=true", "HOME=" + w.dir}
}

// versions names the tools.
func (w *walBench) versions(ctx context.Context) []string {
	var out []string
	for _, argv := range [][]string{{"pgbackrest", "version"}, {"barman-cloud-wal-archive", "--version"}, {"postgres", "--version"}} {
		if argv[0] == "postgres" {
			argv[0], _ = lookPG("postgres")
		}
		m, err := timeCommand(ctx, argv)
		if err == nil {
			out = append(out, strings.TrimSpace(string(m.stdout)))
		}
	}
	return out
}

// prefixes are each tool's objects in MinIO.
var walPrefixes = map[string]string{"pipe": "pipe/wal", "pgbackrest": "pgbackrest/repo/archive/" + walStanza + "/15-1", "barman": "barman/wal"}

// cleaner empties a tool's archive before its next run (its spool too).
func (w *walBench) cleaner(ctx context.Context, tool string) func() {
	return func() {
		_, _ = timeCommand(ctx, []string{w.mc, "rm", "--recursive", "--force", mcAlias + "/" + walPrefixes[tool] + "/"}, w.mcEnv...) // an empty archive is fine
		for _, d := range []string{"pipe-spool", "pgbackrest-spool"} {
			os.RemoveAll(filepath.Join(w.dir, d))
		}
	}
}

// burstCleaner also marks the burst's segments ready, and no other.
func (w *walBench) burstCleaner(ctx context.Context, tool string, segs []string) func() {
	clean := w.cleaner(ctx, tool)
	return func() {
		clean()
		status := filepath.Join(w.pgdata, "pg_wal", "archive_status")
		ents, _ := os.ReadDir(status)
		for _, e := range ents {
			os.Remove(filepath.Join(status, e.Name()))
		}
		for _, s := range segs {
			p := filepath.Join(status, s+".ready")
			if err := os.WriteFile(p, nil, 0o600); err == nil {
				_ = w.chown(p) // pgBackRest's async process renames nothing, but reads them
			}
		}
	}
}

// restoreCleaner makes an empty data directory to recover into: its
// pg_control (pipe and pgBackRest read the cluster's identity there) and
// an empty pg_wal.
func (w *walBench) restoreCleaner(dir string) func() {
	return func() {
		os.RemoveAll(dir)
		for _, d := range []string{dir, filepath.Join(dir, "global"), filepath.Join(dir, "pg_wal")} {
			_ = os.MkdirAll(d, 0o700)
			_ = w.chown(d)
		}
		b, err := os.ReadFile(filepath.Join(w.pgdata, "global", "pg_control"))
		if err == nil {
			p := filepath.Join(dir, "global", "pg_control")
			_ = os.WriteFile(p, b, 0o600)
			_ = w.chown(p)
		}
		ver := filepath.Join(dir, "PG_VERSION")
		_ = os.WriteFile(ver, []byte("15\n"), 0o600)
		_ = w.chown(ver)
		os.RemoveAll(filepath.Join(w.dir, "pgbackrest-spool"))
	}
}

// detachedPeak is the largest RSS of a tool's detached helpers over the
// runs of a scenario.
func (r *walResult) detachedPeak(scenario, tool string) int64 {
	var peak int64
	for _, ph := range r.phases {
		if ph.scenario == scenario && ph.tool == tool {
			peak = max(peak, ph.mon.detachedPeakRSS)
		}
	}
	return peak
}

// whereTimeGoes writes, per scenario and tool, the medians of the
// monitored runs: the commands PostgreSQL would run (exact), the tool's
// detached helpers and MinIO (sampled), and the machine's busy time.
func (r *walResult) whereTimeGoes(w func(string, ...any)) {
	if len(r.phases) == 0 {
		return
	}
	w("\n### Where the time goes\n\nMedians over the runs. *commands* is the CPU of every archive_command or restore_command (rusage, exact); *detached* is the tool's helpers that outlive them (pipe's background pusher or prefetcher, pgBackRest's async process), *MinIO* the store's; both sampled from /proc every 100 ms; *busy* is all the machine's CPU time (2 CPUs: 2 × wall is all there is). Peak RSS: the largest command, and the detached helpers' sum.\n\n")
	w("| scenario | tool | runs | wall | commands CPU | detached CPU | MinIO CPU | busy | peak RSS, command | peak RSS, detached |\n|---|---|---|---|---|---|---|---|---|---|\n")
	labels := map[string]string{"pipe": "pipe, background", "pipe-incommand": "pipe, in the command", "pgbackrest": "pgBackRest", "barman": "barman-cloud"}
	for _, sc := range []string{"burst", "fetch"} {
		for _, tool := range []string{"pipe", "pgbackrest", "barman", "pipe-incommand"} {
			var wall, cmd, det, minio, busy []time.Duration
			var cmdRSS, detRSS int64
			for _, ph := range r.phases {
				if ph.scenario != sc || ph.tool != tool {
					continue
				}
				wall, cmd, det = append(wall, ph.m.wall), append(cmd, ph.m.cpu), append(det, ph.mon.detachedCPU)
				minio, busy = append(minio, ph.mon.minioCPU), append(busy, ph.mon.busy)
				cmdRSS, detRSS = max(cmdRSS, ph.m.maxRSS), max(detRSS, ph.mon.detachedPeakRSS)
			}
			if len(wall) == 0 {
				continue
			}
			w("| %s | %s | %d | %.2f s | %.1f s | %.1f s | %.1f s | %.1f s | %s | %s |\n", sc, labels[tool], len(wall), median(wall).Seconds(), median(cmd).Seconds(),
				median(det).Seconds(), median(minio).Seconds(), median(busy).Seconds(), mib(cmdRSS), mib(detRSS))
		}
	}
}

// walPhase is one monitored run of the burst or the fetch.
type walPhase struct {
	scenario, tool string // burst or fetch; pipe, pipe-incommand, pgbackrest, barman
	rep            int
	m              measurement
	mon            monitorTotals
}

// watch runs one measured run under a monitor and then, untimed, waits
// for the tool's detached helpers (pipe's background pusher or
// prefetcher, pgBackRest's async process) to exit: their CPU and memory
// are the run's, and the next run starts without them.
func (w *walBench) watch(res *walResult, scenario, tool string, rep int, run func() (measurement, error)) (measurement, error) {
	mon := startMonitor(w.watched(), false)
	m, err := run()
	if !mon.waitDetached(time.Minute) {
		logf("  %s, %s: a detached helper still runs a minute after the run", scenario, tool)
	}
	res.phases = append(res.phases, walPhase{scenario: scenario, tool: tool, rep: rep, m: m, mon: mon.stop()})
	return m, err
}

// archiver plays PostgreSQL's archiver over segs: argv plus the segment's
// path, in order, each waited for, then .ready renamed to .done. maxRSS is
// the largest peak of one command.
func (w *walBench) archiver(ctx context.Context, segs []string, env []string, argv ...string) (measurement, error) {
	var total measurement
	start := time.Now()
	status := filepath.Join(w.pgdata, "pg_wal", "archive_status")
	for _, s := range segs {
		m, err := w.runIn(ctx, w.pgdata, env, append(argv[:len(argv):len(argv)], "pg_wal/"+s)...)
		total.cpu += m.cpu
		total.maxRSS = max(total.maxRSS, m.maxRSS)
		if err != nil {
			return total, err
		}
		if err := os.Rename(filepath.Join(status, s+".ready"), filepath.Join(status, s+".done")); err != nil {
			return total, err
		}
	}
	total.wall = time.Since(start)
	return total, nil
}

// recovery plays recovery over segs: argv plus the segment's name and
// pg_wal/RECOVERYXLOG, in order; each result is checked against the
// segment and removed.
func (w *walBench) recovery(ctx context.Context, dir string, segs []string, env []string, argv ...string) (measurement, error) {
	var total measurement
	start := time.Now()
	dest := filepath.Join(dir, "pg_wal", "RECOVERYXLOG")
	for i, s := range segs {
		m, err := w.runIn(ctx, dir, env, append(argv[:len(argv):len(argv)], s, "pg_wal/RECOVERYXLOG")...)
		total.cpu += m.cpu
		total.maxRSS = max(total.maxRSS, m.maxRSS)
		if err != nil {
			return total, err
		}
		// The first and every 32nd are compared byte for byte; all must
		// be whole segments.
		if i%32 == 0 {
			got, err := os.ReadFile(dest)
			if err != nil {
				return total, err
			}
			want, err := os.ReadFile(filepath.Join(w.pgdata, "pg_wal", s))
			if err != nil {
				return total, err
			}
			if !bytes.Equal(got, want) {
				return total, fmt.Errorf("%s restored differs from pg_wal's", s)
			}
		} else if fi, err := os.Stat(dest); err != nil || fi.Size() != 16<<20 {
			return total, fmt.Errorf("%s restored is not a whole segment (%v)", s, err)
		}
		os.Remove(dest)
	}
	total.wall = time.Since(start)
	return total, nil
}

// waitUnlocked waits, at most a minute, until no process holds the lock
// file at p (a background pusher or prefetcher that has not yet exited).
func waitUnlocked(p string) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			return // no lock file: nothing ran
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if err == nil {
			return
		}
	}
}

// stored sums the sizes of a tool's archived objects.
func (w *walBench) stored(ctx context.Context, tool string) int64 {
	m, err := timeCommand(ctx, []string{w.mc, "du", "--json", mcAlias + "/" + walPrefixes[tool] + "/"}, w.mcEnv...)
	if err != nil {
		return 0
	}
	var du struct {
		Size int64 `json:"size"`
	}
	_ = json.Unmarshal(bytes.TrimSpace(m.stdout), &du) // 0 when mc says otherwise
	return du.Size
}

func (r *walResult) races() []*race { return []*race{r.single, r.burst, r.fetch} }

func (r *walResult) markdown(w writer) {
	w("\n## WAL archiving (PostgreSQL 15, MinIO with TLS)\n\n")
	w("Tools: %s. Each archives into its own bucket of one MinIO; pipe and pgBackRest compress with zstd level 3, barman-cloud with gzip (`-z`: it has no zstd). Medians.\n\n", strings.Join(r.versions, "; "))
	w("| what | pipe | pgBackRest | barman-cloud | pipe / fastest peer | target | met? |\n|---|---|---|---|---|---|---|\n")
	row := func(what string, s *race, pipe *contender, faster bool, target float64, targetText string) {
		p := median(pipe.times)
		pg, bc := median(s.refs[0].times), median(s.refs[1].times)
		best := min(pg, bc)
		if !faster {
			best = pg
		}
		ratio := best.Seconds() / p.Seconds() // how many times faster pipe is
		w("| %s | %.3f s | %.3f s | %.3f s | %.2f× as fast | %s | %s |\n", what, p.Seconds(), pg.Seconds(), bc.Seconds(), ratio, targetText, yesNo(ratio >= target))
	}
	row("push one segment, sync, whole process", r.single, r.single.pipe, false, 1.0, "≥ 1.0× pgBackRest (≤ its time)")
	row(r.burst.name+", background pusher", r.burst, r.burst.pipe, true, 1.2, "≥ 1.2×")
	row(r.fetch.name+", background prefetcher", r.fetch, r.fetch.pipe, true, 1.2, "≥ 1.2×")
	row("the burst, pushed ahead by archive_command itself (background = \"never\")", r.burst, r.burst.refs[2], true, 1.2, "≥ 1.2×")
	row("the fetch, prefetched by restore_command itself (background = \"never\")", r.fetch, r.fetch.refs[2], true, 1.2, "≥ 1.2×")
	w("\nPeak RSS of one pipe wal push during the burst in archive_command (async, 4 segments in flight): %s; of pipe's background pusher (4 segments in flight): %s; of its prefetcher (8): %s; the budget `pipe plan` prints for any one of them: %s (%s). pgBackRest's async archive-push process: %s; its async archive-get: %s.\n",
		mib(r.pipeRSS), mib(r.detachedPeak("burst", "pipe")), mib(r.detachedPeak("fetch", "pipe")), mib(r.budget),
		yesNo(max(r.pipeRSS, r.detachedPeak("burst", "pipe"), r.detachedPeak("fetch", "pipe")) <= r.budget),
		mib(r.detachedPeak("burst", "pgbackrest")), mib(r.detachedPeak("fetch", "pgbackrest")))
	r.whereTimeGoes(w)
	if len(r.compressed) > 0 {
		w("\nStored after the burst (%s of WAL): pipe %s, pgBackRest %s, barman-cloud %s.\n", mib(int64(r.segments)*r.segSize),
			mib(r.compressed["pipe"]), mib(r.compressed["pgbackrest"]), mib(r.compressed["barman"]))
	}
	for _, s := range []*race{r.burst, r.fetch} {
		for _, n := range s.notes {
			w("\n- %s: %s\n", s.name, n)
		}
	}
}
