package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc64"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/testcontainers/testcontainers-go/modules/azure/azurite"

	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/conformance"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/azure"
)

// azureEnv is an Azurite blob service and what tests need to reach it.
type azureEnv struct {
	ConnString string // the well-known development account
	URL        string // the account's endpoint, http://host:port/devstoreaccount1
	IP         string // the container's address on the Docker network
	svc        *service.Client
}

func startAzureEnv(t *testing.T) *azureEnv {
	t.Helper()
	cs, ip := startAzurite(t)
	return newAzureEnv(t, cs, ip)
}

func newAzureEnv(t *testing.T, cs, ip string) *azureEnv {
	t.Helper()
	m := regexp.MustCompile(`BlobEndpoint=([^;]+)`).FindStringSubmatch(cs)
	if m == nil {
		t.Fatalf("no BlobEndpoint in the connection string")
	}
	svc, err := service.NewClientFromConnectionString(cs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &azureEnv{ConnString: cs, URL: strings.TrimSuffix(m[1], "/"), IP: ip, svc: svc}
}

// newContainer creates a container with a fresh name.
func (e *azureEnv) newContainer(t *testing.T) string {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	name := "t" + hex.EncodeToString(b[:])
	if _, err := e.svc.NewContainerClient(name).Create(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return name
}

func (e *azureEnv) container(name string) *container.Client { return e.svc.NewContainerClient(name) }

func (e *azureEnv) upload(t *testing.T, cont, key string, b []byte) {
	t.Helper()
	if _, err := e.container(cont).NewBlockBlobClient(key).UploadBuffer(context.Background(), b, nil); err != nil {
		t.Fatal(err)
	}
}

// read returns the committed blob at key, if there is one.
func (e *azureEnv) read(t *testing.T, cont, key string) ([]byte, bool) {
	t.Helper()
	resp, err := e.container(cont).NewBlobClient(key).DownloadStream(context.Background(), nil)
	if bloberror.HasCode(err, bloberror.BlobNotFound) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("reading %s/%s: %v", cont, key, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

// names lists the committed blobs under prefix.
func (e *azureEnv) names(t *testing.T, cont, prefix string) []string {
	t.Helper()
	var out []string
	p := e.container(cont).NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Prefix: &prefix})
	for p.More() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Segment.BlobItems {
			out = append(out, *it.Name)
		}
	}
	sort.Strings(out)
	return out
}

// azureStore is where a conformance sink writes: a fresh container.
type azureStore struct {
	t    *testing.T
	env  *azureEnv
	cont string
}

func (s azureStore) Key(name string) string { return "conformance/" + name }
func (s azureStore) Read(key string) ([]byte, bool) {
	return s.env.read(s.t, s.cont, key)
}

// giantBlob commits one 4 MiB block thousands of times over: a 20 GB blob
// made in an instant, a stream that does not end within any test.
func (e *azureEnv) giantBlob(t *testing.T, cont, key string) {
	t.Helper()
	bb := e.container(cont).NewBlockBlobClient(key)
	id := base64.StdEncoding.EncodeToString([]byte("block-000000"))
	block := bytes.Repeat([]byte("endless "), 4<<20/8)
	if _, err := bb.StageBlock(context.Background(), id, streaming.NopCloser(bytes.NewReader(block)), nil); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 5000)
	for i := range ids {
		ids[i] = id
	}
	if _, err := bb.CommitBlockList(context.Background(), ids, nil); err != nil {
		t.Fatal(err)
	}
}

// badSAS is a well-formed SAS token whose signature is secret.
func badSAS(secret string) string {
	return "sv=2021-08-06&ss=b&srt=sco&sp=rwdlac&se=2099-01-01T00:00:00Z&st=2020-01-01T00:00:00Z&spr=https,http&sig=" + secret
}

// The conformance suite on Azurite, in-process and through the plugin
// protocol (the built-ins served by this test binary).
func TestAzureConformance(t *testing.T) {
	env := startAzureEnv(t)
	// Toxiproxy in front of Azurite, at well under 10 MB/s, for the slow
	// sink.
	slow := startToxiproxy(t, env.IP+":10000")
	if _, err := slow.AddToxic("slow", "bandwidth", "upstream", 1, toxiclient.Attributes{"rate": 512}); err != nil {
		t.Fatal(err)
	}
	slowURL := "http://" + slow.HostPort + "/" + azurite.AccountName

	reg := conformance.Remote(t, all.Builtin())
	rsrc, err := reg.Source("azure")
	if err != nil {
		t.Fatal(err)
	}
	rsnk, err := reg.Sink("azure")
	if err != nil {
		t.Fatal(err)
	}
	boundaries := []struct {
		name   string
		source sdk.SourceType
		sink   sdk.SinkType
	}{
		{"in-process", azure.SourceType{}, azure.SinkType{}},
		{"plugin", rsrc, rsnk},
	}
	t.Run("wal archive", func(t *testing.T) {
		missing, _ := azure.SinkType{}.Configure(context.Background(), sdk.NewConfig(map[string]any{
			"bucket": "no-such-container", "account_url": env.URL, "account_key": azurite.AccountKey}))
		cont := env.newContainer(t)
		walStoreSuite(t, configure(t, azure.SinkType{}.Configure, map[string]any{"bucket": cont, "account_url": env.URL, "account_key": azurite.AccountKey}), "wal/", missing)
	})
	for _, b := range boundaries {
		t.Run(b.name+"/source", func(t *testing.T) {
			conformance.RunSource(t, conformance.Source{
				New: func(t *testing.T, streams map[string][]byte) sdk.Source {
					cont := env.newContainer(t)
					for n, data := range streams {
						env.upload(t, cont, "src/"+n, data)
					}
					env.upload(t, cont, "elsewhere", []byte("not under the prefix"))
					return configure(t, b.source.Configure, map[string]any{
						"bucket": cont, "account_url": env.URL, "account_key": azurite.AccountKey, "prefix": "src/"})
				},
				Endless: func(t *testing.T) (sdk.Source, string) {
					cont := env.newContainer(t)
					env.giantBlob(t, cont, "endless")
					return configure(t, b.source.Configure, map[string]any{"bucket": cont, "connection_string": env.ConnString}), "endless"
				},
				Failing: func(t *testing.T, secret string) (sdk.Source, string) {
					cont := env.newContainer(t)
					env.upload(t, cont, "stream", []byte("data"))
					return configure(t, b.source.Configure, map[string]any{
						"bucket": cont, "account_url": env.URL, "sas_token": badSAS(secret), "retries": int64(1)}), "stream"
				},
			})
		})
		t.Run(b.name+"/sink", func(t *testing.T) {
			conformance.RunSink(t, conformance.Sink{
				New: func(t *testing.T) (sdk.Sink, conformance.Store) {
					cont := env.newContainer(t)
					return configure(t, b.sink.Configure, map[string]any{"bucket": cont, "connection_string": env.ConnString,
						"block_size": int64(1 << 20), "max_single_put_size": int64(2 << 20)}), azureStore{t, env, cont}
				},
				Slow: func(t *testing.T) sdk.Sink {
					cont := env.newContainer(t)
					return configure(t, b.sink.Configure, map[string]any{"bucket": cont, "account_url": slowURL, "account_key": azurite.AccountKey,
						"block_size": int64(256 << 10), "concurrency": int64(2), "max_single_put_size": int64(0)})
				},
				Failing: func(t *testing.T, secret string) sdk.Sink {
					cont := env.newContainer(t)
					return configure(t, b.sink.Configure, map[string]any{"bucket": cont, "account_url": env.URL, "sas_token": badSAS(secret), "retries": int64(1)})
				},
				Exclusive: true,
			})
		})
	}
}

// A wrong account key: caught before any byte moves, or refused by the
// service; no error repeats it, in-process or through the protocol.
func TestAzureWrongAccountKey(t *testing.T) {
	env := startAzureEnv(t)
	cont := env.newContainer(t)
	env.upload(t, cont, "x", []byte("x"))
	reg := conformance.Remote(t, all.Builtin())
	rsrc, _ := reg.Source("azure")
	rsnk, _ := reg.Sink("azure")
	wellFormed := base64.StdEncoding.EncodeToString([]byte("a wrong key, but a well-formed one: sixty-four bytes of it......"))
	const literal = "s3cr3t-p4ssw0rd-for-conformance" // not base64: caught by Configure
	for _, key := range []string{wellFormed, literal} {
		for name, types := range map[string]struct {
			src sdk.SourceType
			snk sdk.SinkType
		}{"in-process": {azure.SourceType{}, azure.SinkType{}}, "plugin": {rsrc, rsnk}} {
			vals := map[string]any{"bucket": cont, "account_url": env.URL, "account_key": key, "retries": int64(1)}
			var msgs []string
			if src, d := types.src.Configure(context.Background(), sdk.NewConfig(vals)); d.HasErrors() {
				msgs = append(msgs, d.Err().Error())
			} else {
				_, err := src.Streams(context.Background())
				msgs = append(msgs, fmt.Sprint(err))
				_, err = src.Open(context.Background(), "x")
				msgs = append(msgs, fmt.Sprint(err))
			}
			if snk, d := types.snk.Configure(context.Background(), sdk.NewConfig(vals)); d.HasErrors() {
				msgs = append(msgs, d.Err().Error())
			} else {
				w, err := snk.Create(context.Background(), sdk.Object{Key: "y", Size: -1})
				if err == nil {
					w.Write([]byte("data"))
					err = w.Commit(context.Background())
				}
				msgs = append(msgs, fmt.Sprint(err))
			}
			for _, m := range msgs {
				if m == "<nil>" {
					t.Errorf("%s: a wrong key worked", name)
				}
				if strings.Contains(m, key) {
					t.Errorf("%s: an error repeats the key: %s", name, m)
				}
				if !strings.Contains(m, "account key") && !strings.Contains(m, "AuthorizationFailure") && !strings.Contains(m, "refused the credentials") {
					t.Errorf("%s: the error does not say the key is wrong: %s", name, m)
				}
			}
			t.Logf("%s, key %.10s…: %s", name, key, msgs[0])
		}
	}
}

// pipeline files ------------------------------------------------------------

// azureVars is the variables block every test pipeline starts with: the
// credentials come in through PIPE_VAR_* into sensitive variables.
const azureVars = `
variable "account_key" { sensitive = true }
variable "account_url" {}
variable "bucket" {}
`

func azureEnvVars(env *azureEnv, url, bucket string) []string {
	return []string{"PIPE_VAR_account_key=" + azurite.AccountKey, "PIPE_VAR_account_url=" + url, "PIPE_VAR_bucket=" + bucket}
}

// azureBlock renders a source or sink block (kind); extra is more attributes.
func azureBlock(kind, extra string) string {
	return fmt.Sprintf(`  %s "azure" {
    bucket      = var.bucket
    account_url = var.account_url
    account_key = var.account_key
%s
  }
`, kind, extra)
}

// secretsSeen fails the test if text holds a credential.
func secretsSeen(t *testing.T, what, text string) {
	t.Helper()
	for _, s := range []string{azurite.AccountKey, azurite.AccountKey[:20], "AccountKey="} {
		if strings.Contains(text, s) {
			t.Errorf("%s holds a credential (%.8s…):\n%s", what, s, text)
		}
	}
}

// runAzurePipe runs pipe and checks its output for credentials.
func runAzurePipe(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	r := runPipe(t, dir, env, args...)
	secretsSeen(t, "pipe "+strings.Join(args, " "), r.Stdout+r.Stderr)
	return r
}

func mustAzurePipe(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	r := runAzurePipe(t, dir, env, args...)
	if r.Err != nil {
		t.Fatalf("pipe %s: %v\n%s", strings.Join(args, " "), r.Err, r.Stderr)
	}
	return r
}

// checkManifests reads every manifest in the container: they exist only
// for complete runs, and hold no credential.
func checkManifests(t *testing.T, env *azureEnv, cont string) []string {
	t.Helper()
	var out []string
	for _, n := range env.names(t, cont, "") {
		if strings.HasSuffix(n, "pipe-manifest.json") {
			b, _ := env.read(t, cont, n)
			secretsSeen(t, "manifest "+n, string(b))
			out = append(out, n)
		}
	}
	return out
}

// writeData writes n bytes to path: runs of random bytes and of text, so
// zstd has something to do and something it cannot.
func writeData(t *testing.T, path string, seed uint64, n int64) {
	t.Helper()
	os.MkdirAll(filepath.Dir(path), 0o755)
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	r := mrand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)})
	buf := make([]byte, 64<<10)
	text := []byte(strings.Repeat("INSERT INTO t VALUES (42, 'pipe backs up azure'); ", 2000))
	for left := n; left > 0; {
		k := min(left, int64(len(buf)))
		if r.Uint64()%2 == 0 {
			r.Read(buf[:k])
			w.Write(buf[:k])
		} else {
			w.Write(text[:k])
		}
		left -= k
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// roundTrip backs data/ up to the container and restores it from the
// newest manifest into out/, byte-identical.
type roundTrip struct {
	stages    string // backup stages
	restore   string // restore stages
	settings  string // pipeline settings
	sinkExtra string
	srcExtra  string
}

func (rt roundTrip) file() string {
	return azureVars + `
pipeline "backup" {
` + rt.settings + `
  source "fs" { path = "data/" }
` + rt.stages + azureBlock("sink", `    key = "pg/${pipeline.name}/${run.id}/"
`+rt.sinkExtra) + `}

pipeline "restore" {
` + rt.settings + azureBlock("source", `    prefix = "pg/backup/"
`+rt.srcExtra) + rt.restore + `
  sink "fs" { path = "out/" }
}
`
}

func (rt roundTrip) run(t *testing.T, dir string, env []string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(rt.file()), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := mustAzurePipe(t, dir, env, "plan", "p.hcl")
	if !strings.Contains(plan.Stdout, "account_key = (sensitive)") {
		t.Errorf("plan does not hide account_key:\n%s", plan.Stdout)
	}
	mustAzurePipe(t, dir, env, "plan", "p.hcl", "--json")
	start := time.Now()
	mustAzurePipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup")
	mid := time.Now()
	os.RemoveAll(filepath.Join(dir, "out"))
	mustAzurePipe(t, dir, env, "run", "p.hcl", "--pipeline", "restore")
	t.Logf("backup %s, restore %s", mid.Sub(start).Round(time.Millisecond), time.Since(mid).Round(time.Millisecond))
	sameTree(t, filepath.Join(dir, "data"), filepath.Join(dir, "out"))
}

const zstdChecksum = `  compress { codec = "zstd" }
  checksum {}
`

// Backups through the CLI, restored from the container's manifest.
func TestAzureRoundTrip(t *testing.T) {
	env := startAzureEnv(t)
	t.Run("empty file", func(t *testing.T) {
		dir, cont := t.TempDir(), env.newContainer(t)
		os.MkdirAll(filepath.Join(dir, "data"), 0o755)
		os.WriteFile(filepath.Join(dir, "data", "empty"), nil, 0o644)
		roundTrip{stages: zstdChecksum, restore: "  decompress {}\n"}.run(t, dir, azureEnvVars(env, env.URL, cont))
		if m := checkManifests(t, env, cont); len(m) != 1 {
			t.Fatalf("manifests %v", m)
		}
	})
	t.Run("one block and one byte", func(t *testing.T) {
		// zstd: the object is about a block; without compression: exactly
		// one block and one byte, staged as two blocks (max_single_put_size
		// = 0) or held and put at once. (The restore's decompress {} takes
		// "none" from the manifest and makes the pipeline a restore, which
		// writes no manifest of its own into out/.)
		for _, tc := range []struct{ name, stages, restore, sinkExtra string }{
			{"zstd", zstdChecksum, "  decompress {}\n", `    block_size = "1MiB"`},
			{"blocks", "  checksum {}\n", "  decompress {}\n", `    block_size = "1MiB"
    max_single_put_size = 0`},
			{"single put", "  checksum {}\n", "  decompress {}\n", `    block_size = "1MiB"
    max_single_put_size = "4MiB"`},
		} {
			t.Run(tc.name, func(t *testing.T) {
				dir, cont := t.TempDir(), env.newContainer(t)
				writeData(t, filepath.Join(dir, "data", "block-plus-one"), 1, 1<<20+1)
				roundTrip{stages: tc.stages, restore: tc.restore, sinkExtra: tc.sinkExtra, srcExtra: `    block_size = "1MiB"`}.run(t, dir, azureEnvVars(env, env.URL, cont))
				if tc.name != "blocks" {
					return
				}
				for _, n := range env.names(t, cont, "pg/") {
					if strings.HasSuffix(n, "block-plus-one") {
						bl, err := env.container(cont).NewBlockBlobClient(n).GetBlockList(context.Background(), blockblob.BlockListTypeCommitted, nil)
						if err != nil {
							t.Fatal(err)
						}
						if len(bl.CommittedBlocks) != 2 || *bl.CommittedBlocks[0].Size != 1<<20 || *bl.CommittedBlocks[1].Size != 1 {
							t.Fatalf("committed blocks: %d", len(bl.CommittedBlocks))
						}
					}
				}
			})
		}
	})
	t.Run("100 streams at once", func(t *testing.T) {
		dir, cont := t.TempDir(), env.newContainer(t)
		r := mrand.New(mrand.NewPCG(100, 1))
		for i := 0; i < 100; i++ {
			writeData(t, filepath.Join(dir, "data", fmt.Sprintf("t%02d", i/10), fmt.Sprintf("table-%03d.dat", i)), uint64(i), int64(r.IntN(600<<10)))
		}
		mustAzurePipe(t, dir, nil, "keygen", "-o", "keys/backup")
		roundTrip{
			settings:  "  streams = 100\n  chunk_size = \"256KiB\"\n",
			stages:    "  compress { codec = \"zstd\" }\n  encrypt { recipients = [file(\"keys/backup.pub\")] }\n  checksum {}\n",
			restore:   "  decrypt { identities = [file(\"keys/backup.key\")] }\n  decompress {}\n",
			sinkExtra: "    block_size = \"64KiB\"\n    max_single_put_size = \"256KiB\"\n    concurrency = 2",
			srcExtra:  "    block_size = \"64KiB\"\n    concurrency = 2",
		}.run(t, dir, azureEnvVars(env, env.URL, cont))
		if n := len(withoutIndex(t, env.names(t, cont, "pg/backup/"), "pg/backup/")); n != 101 {
			t.Fatalf("%d blobs besides the index, want 100 objects and a manifest", n)
		}
		checkManifests(t, env, cont)
	})
}

// A large backup and restore. 1 GiB runs at about 100 MiB/s up and
// 140 MiB/s down against Azurite here; PIPE_AZURE_LARGE sets another size.
func TestAzureLarge(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	size := int64(1 << 30)
	if s := os.Getenv("PIPE_AZURE_LARGE"); s != "" {
		fmt.Sscan(s, &size)
	}
	env := startAzureEnv(t)
	dir, cont := t.TempDir(), env.newContainer(t)
	start := time.Now()
	writeData(t, filepath.Join(dir, "data", "big.dump"), 42, size)
	t.Logf("generated %d MiB in %s", size>>20, time.Since(start).Round(time.Millisecond))
	roundTrip{stages: zstdChecksum, restore: "  decompress {}\n"}.run(t, dir, azureEnvVars(env, env.URL, cont))
}

// Retention: keep_last = 2 over three runs leaves the newest two, whole.
func TestAzureRetention(t *testing.T) {
	env := startAzureEnv(t)
	dir, cont := t.TempDir(), env.newContainer(t)
	writeData(t, filepath.Join(dir, "data", "a"), 1, 300<<10)
	writeData(t, filepath.Join(dir, "data", "b"), 2, 10)
	file := azureVars + `
pipeline "nightly" {
  source "fs" { path = "data/" }
` + zstdChecksum + azureBlock("sink", `    key       = "pg/${pipeline.name}/${run.id}/"
    keep_last = 2`) + `}
`
	os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(file), 0o644)
	vars := azureEnvVars(env, env.URL, cont)
	plan := mustAzurePipe(t, dir, vars, "plan", "p.hcl")
	if !strings.Contains(plan.Stdout, "keep the last 2 runs") {
		t.Errorf("plan:\n%s", plan.Stdout)
	}
	// The sink's blocks are in the budget: the profile's part size and
	// concurrency (balanced: 64 MiB × 4) for each of its 2 streams.
	if !regexp.MustCompile(`endpoints 512 MiB`).MatchString(plan.Stdout) {
		t.Errorf("the plan's budget leaves out the sink's blocks:\n%s", plan.Stdout)
	}
	var runs []string
	for i := 0; i < 3; i++ {
		r := mustAzurePipe(t, dir, vars, "run", "p.hcl", "--json")
		m := regexp.MustCompile(`"run_id": "([^"]+)"`).FindStringSubmatch(r.Stdout)
		if m == nil {
			t.Fatalf("no run id in %s", r.Stdout)
		}
		runs = append(runs, m[1])
		if i == 2 && !strings.Contains(r.Stdout, `"deleted_runs": [`) {
			t.Errorf("the third run deleted nothing:\n%s", r.Stdout)
		}
	}
	names := withoutIndex(t, env.names(t, cont, ""), "pg/nightly/")
	want := []string{}
	for _, run := range runs[1:] {
		for _, o := range []string{"a.zst", "b.zst", "pipe-manifest.json"} {
			want = append(want, "pg/nightly/"+run+"/"+o)
		}
	}
	sort.Strings(want)
	if strings.Join(names, "\n") != strings.Join(want, "\n") {
		t.Fatalf("after 3 runs with keep_last = 2:\n%s\nwant\n%s", strings.Join(names, "\n"), strings.Join(want, "\n"))
	}
	checkManifests(t, env, cont)
}

// Network faults between pipe and Azurite, through Toxiproxy: every run
// either succeeds with a byte-identical restore or fails with a clear
// error, and a failed run leaves no manifest and no committed blob.
func TestAzureFaults(t *testing.T) {
	mem := startAzureEnv(t)
	mpx := startToxiproxy(t, mem.IP+":10000")
	small := roundTrip{
		settings:  "  chunk_size = \"1MiB\"\n",
		stages:    zstdChecksum,
		restore:   "  decompress {}\n",
		sinkExtra: "    block_size = \"256KiB\"\n    max_single_put_size = \"256KiB\"\n    timeout = \"3s\"\n    retries = 4",
		srcExtra:  "    block_size = \"256KiB\"\n    timeout = \"3s\"\n    retries = 4",
	}
	failing := small
	failing.sinkExtra = strings.Replace(failing.sinkExtra, "retries = 4", "retries = 2", 1)
	data := func(t *testing.T, dir string) {
		writeData(t, filepath.Join(dir, "data", "db.dump"), 7, 3<<20+12345)
		writeData(t, filepath.Join(dir, "data", "small.sql"), 8, 5000)
	}
	url := func(px *proxy) string { return "http://" + px.HostPort + "/" + azurite.AccountName }
	// toxic adds a toxic for the rest of the test; remove ends it sooner.
	toxic := func(t *testing.T, px *proxy, name, typ, stream string, attrs toxiclient.Attributes) {
		t.Helper()
		if _, err := px.AddToxic(name, typ, stream, 1, attrs); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { px.RemoveToxic(name) })
	}
	removeAfter := func(px *proxy, name string, d time.Duration) {
		go func() {
			time.Sleep(d)
			px.RemoveToxic(name)
		}()
	}

	// Succeeds despite the fault, in both directions.
	t.Run("latency", func(t *testing.T) {
		dir, cont := t.TempDir(), mem.newContainer(t)
		data(t, dir)
		toxic(t, mpx, "lat-down", "latency", "downstream", toxiclient.Attributes{"latency": 150, "jitter": 50})
		toxic(t, mpx, "lat-up", "latency", "upstream", toxiclient.Attributes{"latency": 100})
		small.run(t, dir, azureEnvVars(mem, url(mpx), cont))
		if m := checkManifests(t, mem, cont); len(m) != 1 {
			t.Fatalf("manifests %v", m)
		}
	})
	t.Run("bandwidth", func(t *testing.T) {
		dir, cont := t.TempDir(), mem.newContainer(t)
		data(t, dir)
		toxic(t, mpx, "bw-up", "bandwidth", "upstream", toxiclient.Attributes{"rate": 1024})
		toxic(t, mpx, "bw-down", "bandwidth", "downstream", toxiclient.Attributes{"rate": 1024})
		small.run(t, dir, azureEnvVars(mem, url(mpx), cont))
		if m := checkManifests(t, mem, cont); len(m) != 1 {
			t.Fatalf("manifests %v", m)
		}
	})
	// Connections cut 100 KiB into every block of 256 KiB. Going up, a
	// block cannot be resumed: every attempt fails until the cutting stops
	// (after 2 s), then the retries go through. Going down, a range
	// resumes where it broke, so each attempt moves it 100 KiB further
	// and the restore succeeds while every connection is still cut.
	t.Run("reset mid-block", func(t *testing.T) {
		dir, cont := t.TempDir(), mem.newContainer(t)
		data(t, dir)
		os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(small.file()), 0o644)
		vars := azureEnvVars(mem, url(mpx), cont)
		toxic(t, mpx, "cut-up", "limit_data", "upstream", toxiclient.Attributes{"bytes": 100 << 10})
		removeAfter(mpx, "cut-up", 2*time.Second)
		start := time.Now()
		mustAzurePipe(t, dir, vars, "run", "p.hcl", "--pipeline", "backup")
		if d := time.Since(start); d < 2*time.Second {
			t.Fatalf("the backup took %s: its blocks went through a connection cut after 100 KiB", d)
		}
		mid := time.Now()
		toxic(t, mpx, "cut-down", "limit_data", "downstream", toxiclient.Attributes{"bytes": 100 << 10})
		mustAzurePipe(t, dir, vars, "run", "p.hcl", "--pipeline", "restore")
		sameTree(t, filepath.Join(dir, "data"), filepath.Join(dir, "out"))
		t.Logf("backup in %s with blocks cut until 2 s; restore in %s with every connection cut after 100 KiB: identical",
			mid.Sub(start).Round(time.Millisecond), time.Since(mid).Round(time.Millisecond))
	})
	// A stall that ends: the stalled requests time out and their retries
	// go through.
	t.Run("timeout then recovery", func(t *testing.T) {
		dir, cont := t.TempDir(), mem.newContainer(t)
		data(t, dir)
		os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(small.file()), 0o644)
		vars := azureEnvVars(mem, url(mpx), cont)
		toxic(t, mpx, "stall", "timeout", "upstream", toxiclient.Attributes{"timeout": 0})
		removeAfter(mpx, "stall", 4*time.Second)
		start := time.Now()
		mustAzurePipe(t, dir, vars, "run", "p.hcl", "--pipeline", "backup")
		t.Logf("backup in %s with every connection stalled for the first 4 s", time.Since(start).Round(time.Millisecond))
		mustAzurePipe(t, dir, vars, "run", "p.hcl", "--pipeline", "restore")
		sameTree(t, filepath.Join(dir, "data"), filepath.Join(dir, "out"))
	})

	// Fails, clearly, and leaves nothing.
	for _, tc := range []struct {
		name, typ string
		attrs     toxiclient.Attributes
		want      string
	}{
		{"connection reset", "reset_peer", toxiclient.Attributes{"timeout": 0}, "connection was reset or closed"},
		{"timeout", "timeout", toxiclient.Attributes{"timeout": 0}, "moved no byte for the whole timeout"},
	} {
		t.Run(tc.name+" fails", func(t *testing.T) {
			dir, cont := t.TempDir(), mem.newContainer(t)
			data(t, dir)
			os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(failing.file()), 0o644)
			toxic(t, mpx, "fault", tc.typ, "upstream", tc.attrs)
			start := time.Now()
			r := runAzurePipe(t, dir, azureEnvVars(mem, url(mpx), cont), "run", "p.hcl", "--pipeline", "backup")
			t.Logf("failed after %s: %s", time.Since(start).Round(time.Millisecond), lastLines(r.Stderr, 1))
			if r.Err == nil {
				t.Fatal("the backup succeeded through a dead connection")
			}
			if !strings.Contains(r.Stderr, tc.want) || !strings.Contains(r.Stderr, cont) {
				t.Errorf("the error does not say what happened where:\n%s", r.Stderr)
			}
			if names := mem.names(t, cont, ""); len(names) != 0 {
				t.Errorf("a failed run left %v", names)
			}
		})
	}
}

// Credentials never appear in output, plans or manifests, also when the
// key is wrong; a missing container is an error that says what to do.
func TestAzureCLISecrets(t *testing.T) {
	env := startAzureEnv(t)
	dir, cont := t.TempDir(), env.newContainer(t)
	writeData(t, filepath.Join(dir, "data", "a"), 1, 1000)
	rt := roundTrip{stages: zstdChecksum, restore: "  decompress {}\n"}
	os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(rt.file()), 0o644)

	wrong := base64.StdEncoding.EncodeToString([]byte("another account's key, sixty-four bytes long, well formed base64."))
	vars := []string{"PIPE_VAR_account_key=" + wrong, "PIPE_VAR_account_url=" + env.URL, "PIPE_VAR_bucket=" + cont}
	r := runAzurePipe(t, dir, vars, "run", "p.hcl", "--pipeline", "backup")
	if r.Err == nil || strings.Contains(r.Stdout+r.Stderr, wrong) || !strings.Contains(r.Stderr, "AuthorizationFailure") {
		t.Fatalf("wrong key: %v\n%s", r.Err, r.Stderr)
	}
	t.Logf("wrong key: %s", lastLines(r.Stderr, 2))
	if names := env.names(t, cont, ""); len(names) != 0 {
		t.Fatalf("a refused run left %v", names)
	}

	vars = azureEnvVars(env, env.URL, "no-such-container")
	r = runAzurePipe(t, dir, vars, "run", "p.hcl", "--pipeline", "backup")
	if r.Err == nil || !strings.Contains(r.Stderr, "ContainerNotFound") || !strings.Contains(r.Stderr, "create it") || !strings.Contains(r.Stderr, "p.hcl:") {
		t.Fatalf("missing container: %v\n%s", r.Err, r.Stderr)
	}
	t.Logf("missing container: %s", lastLines(r.Stderr, 6))

	// A connection string works as well, and is never printed.
	csFile := strings.Replace(rt.file(), `variable "account_key" { sensitive = true }`, `variable "account_key" { sensitive = true }
variable "cs" { sensitive = true }`, 1)
	csFile = strings.ReplaceAll(csFile, "    account_url = var.account_url\n    account_key = var.account_key\n", "    connection_string = var.cs\n")
	os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(csFile), 0o644)
	vars = append(azureEnvVars(env, env.URL, cont), "PIPE_VAR_cs="+env.ConnString)
	for _, args := range [][]string{{"plan", "p.hcl"}, {"plan", "p.hcl", "--json"}, {"run", "p.hcl", "--pipeline", "backup"}, {"run", "p.hcl", "--pipeline", "restore", "--json"}} {
		r := mustAzurePipe(t, dir, vars, args...)
		if strings.Contains(r.Stdout+r.Stderr, env.ConnString) {
			t.Fatalf("pipe %v prints the connection string", args)
		}
	}
	sameTree(t, filepath.Join(dir, "data"), filepath.Join(dir, "out"))
	checkManifests(t, env, cont)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// SIGINT in the middle of an upload: pipe aborts, exits 130, and the
// container holds nothing (no blob, no manifest).
func TestAzureInterrupt(t *testing.T) {
	env := startAzureEnv(t)
	px := startToxiproxy(t, env.IP+":10000")
	if _, err := px.AddToxic("slow", "bandwidth", "upstream", 1, toxiclient.Attributes{"rate": 512}); err != nil {
		t.Fatal(err)
	}
	dir, cont := t.TempDir(), env.newContainer(t)
	big := make([]byte, 8<<20)
	rand.Read(big)
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", "big"), big, 0o644)
	os.WriteFile(filepath.Join(dir, "data", "small"), []byte("small"), 0o644)
	rt := roundTrip{stages: zstdChecksum, restore: "  decompress {}\n", sinkExtra: "    block_size = \"1MiB\"\n    max_single_put_size = 0"}
	os.WriteFile(filepath.Join(dir, "p.hcl"), []byte(rt.file()), 0o644)
	w := startPipe(t, dir, azureEnvVars(env, "http://"+px.HostPort+"/"+azurite.AccountName, cont), "run", "p.hcl", "--pipeline", "backup")
	w.moved(t, "sink azure", "in", 2<<20) // the first 1 MiB block is being staged, at 512 KB/s
	start := time.Now()
	w.cmd.Process.Signal(os.Interrupt)
	r := w.wait()
	out := r.Stdout + r.Stderr
	t.Logf("exited %v %s after SIGINT: %s", r.Err, time.Since(start).Round(time.Millisecond), lastLines(out, 1))
	secretsSeen(t, "pipe output", out)
	if code := w.cmd.ProcessState.ExitCode(); code != 130 {
		t.Fatalf("exit code %d, want 130\n%s", code, out)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("pipe took %s to stop", time.Since(start))
	}
	if names := env.names(t, cont, ""); len(names) != 0 {
		t.Fatalf("an interrupted run left %v", names)
	}
}

// What Azurite does with the checksums a block can carry: it checks
// Content-MD5 (the sink sends it with every block and every Put Blob) and
// refuses a wrong one; it does not implement x-ms-content-crc64 at all
// (HTTP 500 FeatureNotSupported, which azcore would retry), so the sink does
// not send CRC64. The real service checks both.
func TestAzureBlockChecksums(t *testing.T) {
	env := startAzureEnv(t)
	cont := env.newContainer(t)
	bb := env.container(cont).NewBlockBlobClient("checked")
	block := []byte("a block whose checksum the service checks")
	body := func() io.ReadSeekCloser { return streaming.NopCloser(bytes.NewReader(block)) }
	id := base64.StdEncoding.EncodeToString([]byte("block-000001"))
	good := md5.Sum(block)
	bad := md5.Sum([]byte("something else"))
	ctx := context.Background()
	if _, err := bb.StageBlock(ctx, id, body(), &blockblob.StageBlockOptions{TransactionalValidation: blob.TransferValidationTypeMD5(good[:])}); err != nil {
		t.Fatalf("the right MD5: %v", err)
	}
	_, err := bb.StageBlock(ctx, id, body(), &blockblob.StageBlockOptions{TransactionalValidation: blob.TransferValidationTypeMD5(bad[:])})
	var re *azcore.ResponseError
	if !errors.As(err, &re) || re.StatusCode != 400 {
		t.Fatalf("a wrong MD5 was not refused: %v", err)
	}
	t.Logf("a block with a wrong MD5: HTTP %d %s", re.StatusCode, re.ErrorCode)
	_, err = bb.Upload(ctx, body(), &blockblob.UploadOptions{TransactionalValidation: blob.TransferValidationTypeMD5(bad[:])})
	if !errors.As(err, &re) || re.StatusCode != 400 {
		t.Fatalf("a Put Blob with a wrong MD5 was not refused: %v", err)
	}
	noRetry := &blockblob.StageBlockOptions{TransactionalValidation: blob.TransferValidationTypeCRC64(crc64.Checksum(block, crc64.MakeTable(0x9A6C9329AC4BC9B5)))}
	c, err := container.NewClientFromConnectionString(env.ConnString, cont, &container.ClientOptions{ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.NewBlockBlobClient("crc").StageBlock(ctx, id, body(), noRetry)
	if errors.As(err, &re) {
		t.Logf("a block with a (right) CRC64: HTTP %d %s", re.StatusCode, re.ErrorCode)
	} else {
		t.Logf("a block with a (right) CRC64: %v", err)
	}
}
