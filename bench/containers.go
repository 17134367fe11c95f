package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcmariadb "github.com/testcontainers/testcontainers-go/modules/mariadb"
	tcminio "github.com/testcontainers/testcontainers-go/modules/minio"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

// The servers the scenarios run against, in containers: MinIO (the object
// store of every remote scenario), PostgreSQL with its data set, and how
// the host reaches them.

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
// holds under prefix, and MinIO's trash of it, untimed.
func (m *minio) emptier(ctx context.Context, mc, prefix string) func() {
	return func() {
		_, _ = timeCommand(ctx, []string{mc, "rm", "--recursive", "--force", "--quiet", mcAlias + "/" + s3Bucket + "/" + prefix}, m.mcEnv...)
		m.emptyTrash(ctx)
	}
}

func (b *bench) startMinIO(ctx context.Context, mc string) (*minio, error) {
	dockerHost()
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

// emptyTrash deletes what MinIO keeps of deleted and overwritten objects
// (.minio.sys/tmp/.trash, which it empties every 5 minutes): uploading a
// 2 GiB object dozens of times filled tens of GB of disk before then,
// and every scenario's clean (emptier) leaves what it deleted there.
// Where the volume is not on this host's disk (Docker Desktop) it does
// nothing.
func (m *minio) emptyTrash(ctx context.Context) {
	st, err := m.c.Inspect(ctx)
	if err != nil {
		return
	}
	for _, mt := range st.Mounts {
		if mt.Destination != "/data" {
			continue
		}
		trash := filepath.Join(mt.Source, ".minio.sys", "tmp", ".trash")
		entries, _ := os.ReadDir(trash)
		for _, e := range entries {
			_ = os.RemoveAll(filepath.Join(trash, e.Name()))
		}
	}
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

const (
	pgImage    = "postgres:15"
	pgUser     = "bench"
	pgPassword = "bench-pg-secret-42"
	pgDB       = "app"
)

// pgServer is the benchmark's PostgreSQL container.
type pgServer struct {
	host string
	port string
	c    testcontainers.Container
}

// startPG starts PostgreSQL in a container, with pgDB as its database
// and args added to the server's command line.
func startPG(ctx context.Context, args ...string) (*pgServer, error) {
	pg, err := tcpostgres.Run(ctx, pgImage, tcpostgres.WithDatabase(pgDB), tcpostgres.WithUsername(pgUser),
		tcpostgres.WithPassword(pgPassword), tcpostgres.BasicWaitStrategies(),
		// Docker's 64 MiB /dev/shm is too small for parallel VACUUM and
		// index builds; the official image's docs say to raise it.
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) { hc.ShmSize = 1 << 30 }),
		testcontainers.WithCmdArgs(args...))
	s := &pgServer{c: pg}
	if err != nil {
		s.stop()
		return nil, fmt.Errorf("starting PostgreSQL (docker and ../shared/testimages/build.sh): %w", err)
	}
	if s.host, err = pg.Host(ctx); err != nil {
		s.stop()
		return nil, err
	}
	port, err := pg.MappedPort(ctx, "5432/tcp")
	if err != nil {
		s.stop()
		return nil, err
	}
	s.port = port.Port()
	return s, nil
}

// direct connects to the container's own address, bypassing docker-proxy
// (see directAddr), when the host can reach it.
func (s *pgServer) direct(ctx context.Context) bool {
	host, port, ok := directAddr(ctx, s.c, "5432/tcp")
	if ok {
		s.host, s.port = host, port
	}
	return ok
}

func (s *pgServer) stop() {
	if s.c != nil {
		_ = testcontainers.TerminateContainer(s.c)
	}
}

// url is a libpq URL for db, without the password (the tools get it in
// env).
func (s *pgServer) url(db string) string {
	return fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", pgUser, s.host, s.port, db)
}

func (s *pgServer) connect(ctx context.Context, db string) (*pgx.Conn, error) {
	return pgx.Connect(ctx, s.url(db)+"&password="+pgPassword)
}

// attrs are a postgres block's connection attributes; the password is
// the sensitive variable "pgpass".
func (s *pgServer) attrs() string {
	return fmt.Sprintf(`    host     = %q
    port     = %s
    user     = %q
    password = var.pgpass
    sslmode  = "disable"
`, s.host, s.port, pgUser)
}

// pgData is what a loaded data set measures.
type pgData struct {
	size, rows int64 // on disk; of pgbench_accounts and events
	indexes    int
}

// load runs the data set's statements in db and measures what they made.
func (s *pgServer) load(ctx context.Context, db string, sql []string) (pgData, error) {
	var d pgData
	c, err := s.connect(ctx, db)
	if err != nil {
		return d, err
	}
	defer c.Close(context.Background())
	for _, q := range sql {
		if _, err := c.Exec(ctx, q); err != nil {
			return d, fmt.Errorf("loading the data set into %s: %s: %w", db, q, err)
		}
	}
	err = c.QueryRow(ctx, `SELECT pg_database_size(current_database()), (SELECT count(*) FROM pgbench_accounts) + (SELECT count(*) FROM events),
		(SELECT count(*) FROM pg_indexes WHERE schemaname = 'public')`).Scan(&d.size, &d.rows, &d.indexes)
	return d, err
}

// pgEnvVars give the PostgreSQL tools the password.
var pgEnvVars = []string{"PGPASSWORD=" + pgPassword}

// pgBenchDataset is pgbench's tables at scale accounts/100000 and an events table
// with text, numbers, timestamps and JSON, with the indexes and foreign
// keys a restore has to rebuild.
func pgBenchDataset(accounts, events int) []string {
	return []string{
		`CREATE TABLE pgbench_branches (bid int PRIMARY KEY, bbalance int, filler char(88))`,
		`CREATE TABLE pgbench_tellers (tid int PRIMARY KEY, bid int REFERENCES pgbench_branches, tbalance int, filler char(84))`,
		`CREATE TABLE pgbench_accounts (aid int PRIMARY KEY, bid int REFERENCES pgbench_branches, abalance int, filler char(84))`,
		fmt.Sprintf(`INSERT INTO pgbench_branches SELECT b, 0, '' FROM generate_series(1, %d) b`, accounts/100000),
		fmt.Sprintf(`INSERT INTO pgbench_tellers SELECT t, (t - 1) / 10 + 1, 0, '' FROM generate_series(1, %d) t`, accounts/10000),
		fmt.Sprintf(`INSERT INTO pgbench_accounts SELECT a, (a - 1) / 100000 + 1, (a::bigint * 7919 %% 10000)::int - 5000, '' FROM generate_series(1, %d) a`, accounts),
		`CREATE TABLE events (id bigserial PRIMARY KEY, account int NOT NULL REFERENCES pgbench_accounts, kind text NOT NULL,
			amount numeric(12,2), at timestamptz NOT NULL, payload jsonb, note text)`,
		fmt.Sprintf(`INSERT INTO events (account, kind, amount, at, payload, note)
			SELECT i %% %d + 1, (ARRAY['deposit','withdrawal','transfer','fee'])[i %% 4 + 1], (i %% 100000) / 100.0,
				timestamptz '2026-01-01 00:00:00+00' + i * interval '17 seconds',
				jsonb_build_object('i', i, 'tags', jsonb_build_array('a' || i %% 7, 'b' || i %% 11), 'ok', i %% 3 = 0),
				CASE WHEN i %% 5 = 0 THEN NULL ELSE md5(i::text) END
			FROM generate_series(1, %d) i`, accounts, events),
		`CREATE INDEX events_at ON events (at)`,
		`CREATE INDEX events_kind ON events (kind, account)`,
		`VACUUM ANALYZE`,
	}
}

const (
	mariadbImage    = "mariadb:10.11"
	mariadbPassword = "bench-maria-secret-42"
)

// mariaServer is the MariaDB container of the MariaDB cluster scenario.
type mariaServer struct {
	host, port string
	direct     bool   // host:port is the container's own address (see directAddr)
	cnf        string // the client's option file: root, its password, host:port
	stop       func()
}

// startMariaDB starts MariaDB in a container and writes the client's
// option file at cnf, at the container's own address when the host can
// reach it.
func startMariaDB(ctx context.Context, cnf string) (*mariaServer, error) {
	c, err := tcmariadb.Run(ctx, mariadbImage, tcmariadb.WithDatabase("bench"), tcmariadb.WithUsername("root"), tcmariadb.WithPassword(mariadbPassword))
	s := &mariaServer{cnf: cnf, stop: func() {
		if c != nil {
			_ = testcontainers.TerminateContainer(c)
		}
	}}
	fail := func(err error) (*mariaServer, error) {
		s.stop()
		return nil, err
	}
	if err != nil {
		return fail(fmt.Errorf("starting MariaDB (docker and ../shared/testimages/build.sh): %w", err))
	}
	if s.host, err = c.Host(ctx); err != nil {
		return fail(err)
	}
	mapped, err := c.MappedPort(ctx, "3306/tcp")
	if err != nil {
		return fail(err)
	}
	s.port = mapped.Port()
	if host, port, ok := directAddr(ctx, c, "3306/tcp"); ok {
		s.host, s.port, s.direct = host, port, true
	}
	if err := os.WriteFile(cnf, fmt.Appendf(nil, "[client]\nuser=root\npassword=%q\nhost=%s\nport=%s\nprotocol=tcp\n", mariadbPassword, s.host, s.port), 0o600); err != nil {
		return fail(err)
	}
	return s, nil
}

// sql runs statements with the mariadb client and returns what it
// printed, without column names.
func (s *mariaServer) sql(ctx context.Context, q string) (string, error) {
	cmd := exec.CommandContext(ctx, "mariadb", "--defaults-extra-file="+s.cnf, "--batch", "--skip-column-names")
	cmd.Stdin = strings.NewReader(q)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%v: %s", err, errb.String())
	}
	return strings.TrimSpace(out.String()), nil
}

// dockerHost points testcontainers at localhost when the bench runs in a
// container itself (/.dockerenv): the ports Docker maps are there.
func dockerHost() {
	if os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		if _, err := os.Stat("/.dockerenv"); err == nil {
			os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "localhost")
		}
	}
}

// The database scenarios put the database server, MinIO and both
// contenders on the same CPUs. Through a port Docker maps, every byte also
// passes through docker-proxy, Docker's userland TCP forwarder, one more
// process copying it on those CPUs (0.9-1.5 CPU-s of a 5-second run,
// bench/reports/2026-11-27-cluster-direct.md); a deployment has no such
// process between a client and its database or store. So the postgres,
// pgcluster and mysqlcluster scenarios connect to the containers' own
// addresses when the host can reach them (Linux's bridge network), both
// contenders alike, and their reports say which way they went.

// directAddr is where the host reaches port (e.g. "5432/tcp") of c without
// docker-proxy: the container's IP and the port itself. ok is false when
// the host cannot reach it (Docker Desktop, a remote engine).
func directAddr(ctx context.Context, c testcontainers.Container, port string) (host, p string, ok bool) {
	ip, err := c.ContainerIP(ctx)
	if err != nil || ip == "" {
		return "", "", false
	}
	p, _, _ = strings.Cut(port, "/")
	addr := net.JoinHostPort(ip, p)
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", "", false
	}
	conn.Close()
	return ip, p, true
}

// connectionNote says how a scenario's report names its connections.
func connectionNote(direct bool) string {
	if direct {
		return "Both contenders connect to the containers' own addresses, not through the ports Docker maps (docker-proxy would copy every byte once more on the same CPUs)."
	}
	return "Both contenders connect through the ports Docker maps (docker-proxy copies every byte once more on the same CPUs): the host cannot reach the containers' own addresses."
}
