package main

import (
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
)

// What the WAL and base backup scenarios share: a PostgreSQL 15 server
// on this host (initdb'd into a folder the postgres user owns, since
// PostgreSQL runs its archive and restore commands as that user), MinIO
// with TLS in a container (pgBackRest's S3 repository speaks nothing
// else), and how each tool is configured and run.

const (
	walPGUser   = "postgres"
	walStanza   = "bench"
	walBarmanID = "bench"
)

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
	// cred runs the tools as PostgreSQL runs its commands: as postgres
	// when the harness is root (nil otherwise), with userEnv (its HOME,
	// USER and LOGNAME).
	cred    *syscall.Credential
	userEnv []string
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
		u, err := user.Lookup(walPGUser)
		if err != nil {
			return nil, fmt.Errorf("the harness runs as root and there is no %s user to run PostgreSQL as: %w", walPGUser, err)
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		w.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		w.userEnv = []string{"HOME=" + u.HomeDir, "USER=" + u.Username, "LOGNAME=" + u.Username}
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
	if w.cred == nil {
		return nil
	}
	return os.Chown(p, int(w.cred.Uid), int(w.cred.Gid))
}

// run times a command as PostgreSQL would run it: as its user, in its
// data directory, with env.
func (w *walBench) run(ctx context.Context, env []string, argv ...string) (measurement, error) {
	return w.runIn(ctx, w.pgdata, env, argv...)
}

// As PostgreSQL's archiver and startup process run archive_command and
// restore_command: system(), a /bin/sh -c of the command line, as the
// server's user (setuid in the child, as the server already is that
// user). Not runuser: its PAM session took 7-8 ms of CPU and 8-11 ms
// for every command of every tool, as much as a pipe-wal answer itself,
// which no server pays.
func (w *walBench) runIn(ctx context.Context, dir string, env []string, argv ...string) (measurement, error) {
	if _, err := os.Stat(dir); err != nil {
		dir = w.dir
	}
	if w.cred != nil {
		env = append(w.userEnv[:len(w.userEnv):len(w.userEnv)], env...)
	}
	m, err := runCommandAs(ctx, dir, w.cred, []string{"/bin/sh", "-c", shellLine(argv)}, false, env...)
	if err != nil {
		return m, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return m, nil
}

// shellLine is argv as one command line for /bin/sh -c, each argument
// quoted.
func shellLine(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = shq(a)
	}
	return strings.Join(q, " ")
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
	m, err := startTLSMinIO(ctx, w.dir, w.mc, []string{"pipe", "pgbackrest", "barman"})
	if err != nil {
		return err
	}
	w.stopMinIO = m.stop
	w.cert = m.cert
	w.hostPort = "localhost:" + m.port
	w.endpoint = "https://" + w.hostPort
	w.mcEnv = []string{"MC_HOST_" + mcAlias + "=https://" + minioUser + ":" + minioSecret + "@" + w.hostPort,
		"MC_CONFIG_DIR=" + filepath.Join(w.dir, "mc-config"), "SSL_CERT_FILE=" + w.cert}
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
func (w *walBench) pipeArchive(async bool, background string, prefetch int) string {
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
    prefetch = %d
  }
}
`, w.endpoint, minioUser, background, async, filepath.Join(w.dir, "pipe-spool"), prefetch)
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
