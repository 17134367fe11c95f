package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"flag"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/modules/azure/azurite"
	tcminio "github.com/testcontainers/testcontainers-go/modules/minio"
	"github.com/testcontainers/testcontainers-go/modules/toxiproxy"
	"github.com/testcontainers/testcontainers-go/wait"

	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/conformance"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Images: the official names (built locally by ../shared/testimages/build.sh
// where nothing can be pulled).
const (
	minioImage     = "minio/minio:RELEASE.2024-01-16T16-07-38Z"
	fakeGCSImage   = "fsouza/fake-gcs-server:1.56.1"
	azuriteImage   = "mcr.microsoft.com/azure-storage/azurite:3.28.0"
	toxiproxyImage = "ghcr.io/shopify/toxiproxy:2.12.0"
)

// pipeBin is the pipe binary under test, built once; pipeWALBin is
// pipe-wal, beside it.
var pipeBin, pipeWALBin string

func TestMain(m *testing.M) {
	// conformance.Remote runs the built-ins through the protocol with this
	// test binary as their plugin process.
	conformance.ServeIfAsked(all.Builtin())
	// On machines where /.dockerenv exists testcontainers-go would dial the
	// default gateway; the containers' ports are on localhost.
	// Under -short every test skips at requireDocker: no pipe to build.
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	if _, err := os.Stat("/.dockerenv"); err == nil && os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == "" {
		os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "localhost")
	}
	dir, err := os.MkdirTemp("", "pipe-integration-")
	if err != nil {
		panic(err)
	}
	pipeBin, pipeWALBin = filepath.Join(dir, "pipe"), filepath.Join(dir, "pipe-wal")
	// With the build tags of GOFLAGS, which make test sets as make build does.
	for bin, pkg := range map[string]string{pipeBin: "../cmd/pipe", pipeWALBin: "../cmd/pipe-wal"} {
		build := exec.Command("go", "build", "-o", bin, pkg)
		if bin == pipeWALBin {
			build.Env = append(os.Environ(), "CGO_ENABLED=0") // as make build does
		}
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	dockerOnce sync.Once
	dockerErr  error
)

// requireDocker skips the test without a Docker engine, or fails it in CI.
// Under -short it skips: every caller starts containers, which take
// minutes (make test-short).
func requireDocker(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts containers; skipped under -short")
	}
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err != nil {
			dockerErr = err
			return
		}
		defer cli.Close()
		_, dockerErr = cli.Ping(ctx, client.PingOptions{})
	})
	if dockerErr == nil {
		return
	}
	unavailable(t, fmt.Sprintf("no Docker engine (%v): start dockerd and build the test images with ../shared/testimages/build.sh (on machines that can pull, Docker alone is enough)", dockerErr))
}

// unavailable stops a test that lacks what it needs (Docker, a client
// program): a failure in CI, where everything must run, a skip elsewhere.
func unavailable(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// mappedAddr is where the host reaches a container's port.
func mappedAddr(t *testing.T, c testcontainers.Container, port string) (host, mapped string) {
	t.Helper()
	ctx := context.Background()
	host, err := c.Host(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.MappedPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	return host, p.Port()
}

// minioServer is a MinIO container.
type minioServer struct {
	Endpoint   string // http://host:port
	HostPort   string // host:port
	IP         string // the container's address on the Docker network
	User, Pass string
	c          testcontainers.Container
}

func startMinIO(t *testing.T) *minioServer {
	t.Helper()
	requireDocker(t)
	ctx := context.Background()
	c, err := tcminio.Run(ctx, minioImage, tcminio.WithUsername("pipeadmin"), tcminio.WithPassword("pipe-secret-key-42"))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatal(err)
	}
	hp, err := c.ConnectionString(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ip, err := c.ContainerIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &minioServer{Endpoint: "http://" + hp, HostPort: hp, IP: ip, User: c.Username, Pass: c.Password, c: c}
}

// startFakeGCS starts fake-gcs-server and returns its endpoint
// (http://host:port) and its address on the Docker network.
func startFakeGCS(t *testing.T) (endpoint, ip string) {
	t.Helper()
	requireDocker(t)
	ctx := context.Background()
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Image:        fakeGCSImage,
			Cmd:          []string{"-scheme", "http", "-port", "4443", "-public-host", "localhost:4443"},
			ExposedPorts: []string{"4443/tcp"},
			WaitingFor:   wait.ForHTTP("/storage/v1/b").WithPort("4443/tcp"),
		},
		Started: true,
	})
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := c.PortEndpoint(ctx, "4443/tcp", "http")
	if err != nil {
		t.Fatal(err)
	}
	ip, err = c.ContainerIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ep, ip
}

// startAzurite starts Azurite's blob service and returns a connection
// string for its default (well-known, public) development account, and the
// container's address on the Docker network.
func startAzurite(t *testing.T) (connString, ip string) {
	t.Helper()
	requireDocker(t)
	ctx := context.Background()
	// In memory: Azurite 3.28.0's disk store breaks when a client's
	// connection drops in the middle of an upload (later uploads of any
	// blob fail with HTTP 500, EBADF in its debug log; once the descriptor
	// is reused Azurite writes blob data into another client's socket, and
	// at times it dies). The fault tests drop uploads on purpose.
	c, err := azurite.Run(ctx, azuriteImage, azurite.WithEnabledServices(azurite.BlobService),
		testcontainers.WithCmdArgs("--skipApiVersionCheck"), azurite.WithInMemoryPersistence(0))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatal(err)
	}
	ep, err := c.BlobServiceURL(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ip, err = c.ContainerIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cs := fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s/%s;",
		azurite.AccountName, azurite.AccountKey, strings.TrimSuffix(ep, "/"), azurite.AccountName)
	return cs, ip
}

// proxy is a Toxiproxy proxy in front of a server, for network faults.
type proxy struct {
	HostPort string // where pipe connects
	IP       string // the container's address on the Docker network (port 8666)
	*toxiclient.Proxy
}

// startToxiproxy puts a Toxiproxy container in front of upstream
// (ip:port on the Docker network) and returns the proxy.
func startToxiproxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	requireDocker(t)
	ctx := context.Background()
	c, err := toxiproxy.Run(ctx, toxiproxyImage, toxiproxy.WithProxy("upstream", upstream))
	testcontainers.CleanupContainer(t, c)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := c.ProxiedEndpoint(8666)
	if err != nil {
		t.Fatal(err)
	}
	uri, err := c.URI(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p, err := toxiclient.NewClient(uri).Proxy("upstream")
	if err != nil {
		t.Fatal(err)
	}
	ip, err := c.ContainerIP(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &proxy{HostPort: host + ":" + port, IP: ip, Proxy: p}
}

// result is what a pipe command printed.
type result struct {
	Stdout, Stderr string
	Err            error
}

// runPipe runs the pipe binary in dir with env added to the environment.
func runPipe(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, pipeBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return result{Stdout: out.String(), Stderr: errb.String(), Err: err}
}

// mustPipe runs pipe and fails the test if it fails.
func mustPipe(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	r := runPipe(t, dir, env, args...)
	if r.Err != nil {
		t.Fatalf("pipe %s: %v\n%s", strings.Join(args, " "), r.Err, r.Stderr)
	}
	return r
}

// configure configures an endpoint type in-process with vals and closes
// the instance when the test ends.
func configure[T any](t *testing.T, f func(context.Context, sdk.Config) (T, sdk.Diagnostics), vals map[string]any) T {
	t.Helper()
	x, d := f(context.Background(), sdk.NewConfig(vals))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	if c, ok := any(x).(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}
	return x
}

// randomBytes returns n deterministic pseudo-random (incompressible) bytes.
func randomBytes(seed uint64, n int) []byte {
	b := make([]byte, n)
	mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 1}).Read(b)
	return b
}

// writeFile writes data to path, creating its folders.
func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// randomFile writes n pseudo-random bytes to path without holding them in
// memory (incompressible: the stored object is as large as the input).
func randomFile(t *testing.T, path string, n int64, seed uint64) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	r := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), 2})
	if _, err := io.CopyN(f, r, n); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// sameTree fails unless got holds exactly the files under want, each with
// the same bytes.
func sameTree(t *testing.T, want, got string) {
	t.Helper()
	digests := func(root string) map[string][32]byte {
		out := map[string][32]byte{}
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			h := sha256.New()
			if _, err := io.Copy(h, bufio.NewReaderSize(f, 1<<20)); err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			out[filepath.ToSlash(rel)] = [32]byte(h.Sum(nil))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	w, g := digests(want), digests(got)
	for name, d := range w {
		if gd, ok := g[name]; !ok {
			t.Errorf("%s was not restored", name)
		} else if gd != d {
			t.Errorf("%s was restored with other bytes", name)
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			t.Errorf("%s was restored but is not in %s", name, want)
		}
	}
}

// indexName is the catalog index every backup into a folder of runs
// keeps at the folder's root. The tests spell it out rather than import
// it: it is part of the store's format, and a rename must show here.
const indexName = "pipe-index.json"

// withoutIndex is keys less the catalog index, which must be there,
// exactly once, at root (the folder of runs, ending in "/").
func withoutIndex(t *testing.T, keys []string, root string) []string {
	t.Helper()
	var rest []string
	found := 0
	for _, k := range keys {
		if path.Base(k) != indexName {
			rest = append(rest, k)
			continue
		}
		if k != root+indexName {
			t.Errorf("an index at %s, want it at %s only", k, root+indexName)
		}
		found++
	}
	if found != 1 {
		t.Errorf("%d indexes at %s among %v, want 1", found, root, keys)
	}
	return rest
}
