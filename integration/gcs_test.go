package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/klauspost/compress/zstd"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/conformance"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/gcs"
)

// gcsServer is a fake-gcs-server container and a client that talks to it
// directly (not through pipe), to set up and inspect buckets.
type gcsServer struct {
	Endpoint string // http://host:port
	IP       string // on the Docker network
	c        *storage.Client
}

func gcsStart(t *testing.T) *gcsServer {
	t.Helper()
	ep, ip := startFakeGCS(t)
	c, err := storage.NewClient(context.Background(), option.WithEndpoint(ep+"/storage/v1/"),
		option.WithoutAuthentication(), storage.WithJSONReads(), storage.WithDisabledClientMetrics())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &gcsServer{Endpoint: ep, IP: ip, c: c}
}

// bucket creates a bucket over the JSON API.
func (g *gcsServer) bucket(t *testing.T, name string) string {
	t.Helper()
	resp, err := http.Post(g.Endpoint+"/storage/v1/b?project=test", "application/json", strings.NewReader(fmt.Sprintf(`{"name":%q}`, name)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("creating bucket %s: %s %s", name, resp.Status, b)
	}
	return name
}

func (g *gcsServer) put(t *testing.T, bucket, key string, data []byte) {
	t.Helper()
	w := g.c.Bucket(bucket).Object(key).NewWriter(context.Background())
	w.ChunkSize = 0
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

func (g *gcsServer) get(bucket, key string) ([]byte, bool) {
	r, err := g.c.Bucket(bucket).Object(key).NewReader(context.Background())
	if err != nil {
		return nil, false
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	return b, err == nil
}

// list returns the keys under prefix.
func (g *gcsServer) list(t *testing.T, bucket, prefix string) []string {
	t.Helper()
	var out []string
	it := g.c.Bucket(bucket).Objects(context.Background(), &storage.Query{Prefix: prefix})
	for {
		a, err := it.Next()
		if err == iterator.Done {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, a.Name)
	}
	sort.Strings(out)
	return out
}

// gcsValues are vals with the schema's defaults for what vals leaves out.
func gcsValues(s sdk.Schema, vals map[string]any) map[string]any {
	m := map[string]any{}
	for _, a := range s.Attributes {
		if a.Default != nil {
			m[a.Name] = a.Default
		}
	}
	for k, v := range vals {
		m[k] = v
	}
	return m
}

var gcsSeq atomic.Int64

// gcsPrefix is a fresh folder in a bucket for one test.
func gcsPrefix() string { return fmt.Sprintf("t%04d/", gcsSeq.Add(1)) }

type gcsStore struct {
	g      *gcsServer
	bucket string
	prefix string
}

func (s gcsStore) Key(name string) string { return s.prefix + name }
func (s gcsStore) Read(key string) ([]byte, bool) {
	return s.g.get(s.bucket, key)
}

// gcsSecretCredentials are service account credentials that carry secret in
// their private key, key id and token URL, and that fail: the key does
// not parse and the token endpoint is closed.
func gcsSecretCredentials(secret string) string {
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "proj", "private_key_id": secret,
		"private_key":  "-----BEGIN PRIVATE KEY-----\n" + secret + "\n-----END PRIVATE KEY-----\n",
		"client_email": "backup@proj.iam.gserviceaccount.com", "token_uri": "http://127.0.0.1:1/token?key=" + secret,
	})
	return string(b)
}

func TestGCSConformance(t *testing.T) {
	g := gcsStart(t)
	bucket := g.bucket(t, "conformance")
	proxy := startToxiproxy(t, g.IP+":4443")
	through := "http://" + proxy.HostPort
	reg := conformance.Remote(t, all.Builtin())
	rsrc, err := reg.Source("gcs")
	if err != nil {
		t.Fatal(err)
	}
	rsnk, err := reg.Sink("gcs")
	if err != nil {
		t.Fatal(err)
	}
	kinds := []struct {
		name   string
		source sdk.SourceType
		sink   sdk.SinkType
	}{{"in-process", gcs.SourceType{}, gcs.SinkType{}}, {"plugin", rsrc, rsnk}}
	srcSchema, snkSchema := gcs.SourceType{}.Schema(), gcs.SinkType{}.Schema()
	base := func(endpoint string) map[string]any {
		return map[string]any{"bucket": bucket, "endpoint": endpoint, "timeout": 10 * time.Second, "retries": int64(2)}
	}
	// A slow link for the backpressure and cancellation cases.
	if _, err := proxy.AddToxic("slow", "bandwidth", "upstream", 1, toxiclient.Attributes{"rate": 1024}); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.AddToxic("slow-down", "bandwidth", "downstream", 1, toxiclient.Attributes{"rate": 512}); err != nil {
		t.Fatal(err)
	}
	endless := gcsPrefix() + "big"
	g.put(t, bucket, endless, randomBytes(9, 16<<20))

	t.Run("wal archive", func(t *testing.T) {
		vals := base(g.Endpoint)
		vals["bucket"] = "no-such-bucket"
		missing, _ := gcs.SinkType{}.Configure(context.Background(), sdk.NewConfig(gcsValues(snkSchema, vals)))
		walStoreSuite(t, configure(t, gcs.SinkType{}.Configure, gcsValues(snkSchema, base(g.Endpoint))), gcsPrefix(), missing)
	})
	for _, k := range kinds {
		t.Run(k.name+"/source", func(t *testing.T) {
			conformance.RunSource(t, conformance.Source{
				New: func(t *testing.T, streams map[string][]byte) sdk.Source {
					prefix := gcsPrefix()
					for n, b := range streams {
						g.put(t, bucket, prefix+n, b)
					}
					vals := base(g.Endpoint)
					vals["prefix"], vals["part_size"], vals["concurrency"] = prefix, int64(1<<20), int64(3)
					return configure(t, k.source.Configure, gcsValues(srcSchema, vals))
				},
				// A large object through a slow link never ends within
				// the test: cancellation must stop its parallel reads.
				Endless: func(t *testing.T) (sdk.Source, string) {
					vals := base(through)
					vals["key"], vals["part_size"], vals["concurrency"] = endless, int64(128<<10), int64(2)
					return configure(t, k.source.Configure, gcsValues(srcSchema, vals)), "big"
				},
				Failing: func(t *testing.T, secret string) (sdk.Source, string) {
					vals := base(g.Endpoint)
					vals["prefix"], vals["credentials_json"] = gcsPrefix(), gcsSecretCredentials(secret)
					return configure(t, k.source.Configure, gcsValues(srcSchema, vals)), "x"
				},
			})
		})
		t.Run(k.name+"/sink", func(t *testing.T) {
			conformance.RunSink(t, conformance.Sink{
				New: func(t *testing.T) (sdk.Sink, conformance.Store) {
					vals := base(g.Endpoint)
					vals["chunk_size"] = int64(1 << 20) // the 7 MiB case takes several chunks
					return configure(t, k.sink.Configure, gcsValues(snkSchema, vals)), gcsStore{g, bucket, gcsPrefix()}
				},
				Slow: func(t *testing.T) sdk.Sink {
					vals := base(through)
					vals["chunk_size"] = int64(256 << 10)
					return configure(t, k.sink.Configure, gcsValues(snkSchema, vals))
				},
				Failing: func(t *testing.T, secret string) sdk.Sink {
					vals := base(g.Endpoint)
					vals["credentials_json"] = gcsSecretCredentials(secret)
					return configure(t, k.sink.Configure, gcsValues(snkSchema, vals))
				},
				Exclusive: true,
			})
		})
	}
}

// gcsRig is a bucket in fake-gcs-server and a working folder for pipe.
type gcsRig struct {
	g      *gcsServer
	bucket string
	dir    string
}

func gcsNewRig(t *testing.T, g *gcsServer, bucket string) *gcsRig {
	return &gcsRig{g: g, bucket: bucket, dir: t.TempDir()}
}

func (r *gcsRig) file(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(r.dir, name)
	writeFile(t, p, data)
	return p
}

// gcsPipelines is a backup of data/ through zstd (and age) and a
// checksum into the bucket under root, and a restore of the newest run
// into out/. endpoint "" leaves the emulator to STORAGE_EMULATOR_HOST.
type gcsPipelines struct {
	bucket, endpoint, root string
	age                    bool
	codec                  string // "zstd" unless set
	streams                int
	frame                  string // the pipelines' chunk_size, if set
	sink, source           string // extra attributes
	prelude                string // variables, say
}

func (p gcsPipelines) String() string {
	ep, enc, dec, streams, codec := "", "", "", "", p.codec
	if p.endpoint != "" {
		ep = fmt.Sprintf("endpoint = %q", p.endpoint)
	}
	if p.age {
		enc = `encrypt { recipients = [file("keys/backup.pub")] }`
		dec = `decrypt { identities = [file("keys/backup.key")] }`
	}
	if p.streams > 0 {
		streams = fmt.Sprintf("streams = %d", p.streams)
	}
	if p.frame != "" {
		streams += fmt.Sprintf("\n  chunk_size = %q", p.frame)
	}
	if codec == "" {
		codec = "zstd"
	}
	return p.prelude + fmt.Sprintf(`
pipeline "backup" {
  %s
  source "fs" { path = "data" }
  compress { codec = %q }
  %s
  checksum {}
  sink "gcs" {
    bucket = %q
    %s
    key    = "%s/${pipeline.name}/${run.id}/"
    %s
  }
}

pipeline "restore" {
  %s
  source "gcs" {
    bucket = %q
    %s
    prefix = "%s/backup/"
    %s
  }
  %s
  decompress {}
  sink "fs" { path = "out/" }
}
`, streams, codec, enc, p.bucket, ep, p.root, p.sink, streams, p.bucket, ep, p.root, p.source, dec)
}

// run runs one pipeline of file and fails the test if it fails.
func (r *gcsRig) run(t *testing.T, env []string, file, pipeline string) (result, time.Duration) {
	t.Helper()
	start := time.Now()
	res := mustPipe(t, r.dir, env, "run", file, "--pipeline", pipeline, "--progress", "never")
	return res, time.Since(start)
}

func gcsRate(n int64, d time.Duration) string {
	return fmt.Sprintf("%.0f MB/s", float64(n)/1e6/d.Seconds())
}

// manifests returns the manifest keys under prefix.
func (r *gcsRig) manifests(t *testing.T, prefix string) []string {
	var out []string
	for _, k := range r.g.list(t, r.bucket, prefix) {
		if strings.HasSuffix(k, "pipe-manifest.json") {
			out = append(out, k)
		}
	}
	return out
}

func TestGCSRoundTrip(t *testing.T) {
	g := gcsStart(t)
	bucket := g.bucket(t, "roundtrip")
	const chunk = 1 << 20 // the sink's chunk_size in these runs
	for _, tc := range []struct {
		name  string
		files map[string]int64 // name → size
		p     gcsPipelines
		env   func(*gcsServer) []string
	}{
		{name: "empty", files: map[string]int64{"empty": 0}},
		// Stored bytes of exactly one upload chunk and one byte (no
		// compression, so the size is known), and a stream of one
		// pipeline chunk and one byte through zstd and age.
		{name: "chunk-plus-one", files: map[string]int64{"raw": chunk + 1}, p: gcsPipelines{codec: "none"}},
		{name: "chunk-plus-one-age", files: map[string]int64{"frame": 4<<20 + 1, "raw": chunk + 1}, p: gcsPipelines{age: true}},
		// 100 streams, all at once, with the emulator from
		// STORAGE_EMULATOR_HOST instead of an endpoint attribute.
		{name: "100-streams", files: func() map[string]int64 {
			m := map[string]int64{}
			for i := 0; i < 100; i++ {
				m[fmt.Sprintf("s/%03d", i)] = int64(i * 3001 % 150_000)
			}
			return m
		}(), p: gcsPipelines{streams: 100, frame: "256KiB"}, env: func(g *gcsServer) []string {
			return []string{"STORAGE_EMULATOR_HOST=" + strings.TrimPrefix(g.Endpoint, "http://")}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := gcsNewRig(t, g, bucket)
			var total int64
			for name, size := range tc.files {
				randomFile(t, filepath.Join(r.dir, "data", name), size, uint64(size))
				total += size
			}
			p := tc.p
			p.bucket, p.root = bucket, tc.name
			p.sink = fmt.Sprintf("chunk_size = %q", "1MiB")
			p.source = `part_size = "256KiB"`
			var env []string
			if tc.env != nil {
				env = tc.env(g)
			} else {
				p.endpoint = g.Endpoint
			}
			if p.age {
				mustPipe(t, r.dir, nil, "keygen", "-o", "keys/backup")
			}
			r.file(t, "p.hcl", []byte(p.String()))
			_, tb := r.run(t, env, "p.hcl", "backup")
			if m := r.manifests(t, tc.name+"/"); len(m) != 1 {
				t.Fatalf("manifests %v", m)
			}
			if n := len(withoutIndex(t, r.g.list(t, bucket, tc.name+"/"), tc.name+"/backup/")); n != len(tc.files)+1 {
				t.Fatalf("%d objects stored besides the index, want %d and a manifest", n, len(tc.files))
			}
			res, tr := r.run(t, env, "p.hcl", "restore")
			if !strings.Contains(res.Stderr, "from manifest") {
				t.Errorf("the restore did not follow the manifest:\n%s", res.Stderr)
			}
			sameTree(t, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "out"))
			if tc.name == "chunk-plus-one" {
				// The stored object is exactly one upload chunk and a byte.
				a, err := g.c.Bucket(bucket).Object(path.Dir(r.manifests(t, tc.name+"/")[0]) + "/raw").Attrs(context.Background())
				if err != nil || a.Size != chunk+1 {
					t.Errorf("stored object: %v %v, want %d bytes", a, err, chunk+1)
				}
			}
			// A restore may also name one run's manifest (key) instead of
			// a folder of runs (prefix).
			m := r.manifests(t, tc.name+"/")[0]
			keyed := strings.Replace(p.String(), fmt.Sprintf("prefix = \"%s/backup/\"", tc.name), fmt.Sprintf("key = %q", m), 1)
			keyed = strings.Replace(keyed, `path = "out/"`, `path = "out-key/"`, 1)
			r.file(t, "key.hcl", []byte(keyed))
			r.run(t, env, "key.hcl", "restore")
			sameTree(t, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "out-key"))
			t.Logf("%d files, %d bytes: backup %s, restore %s", len(tc.files), total, tb.Round(time.Millisecond), tr.Round(time.Millisecond))
		})
	}
}

// TestGCSLarge backs up and restores 1 GiB of incompressible data, so the
// stored object is 1 GiB too. fake-gcs-server holds a resumable upload in
// memory and hashes (MD5 and CRC32C) everything received so far on every
// chunk, so its cost grows with size²/chunk: on this 2-CPU machine the
// backup took 103 s with 16 MiB chunks and 45-60 s with 64 MiB ones (the
// default here; GCS_CHUNK=16MiB measures another size). Real GCS has no
// such cost.
func TestGCSLarge(t *testing.T) {
	g := gcsStart(t)
	bucket := g.bucket(t, "large")
	const size = 1 << 30
	r := gcsNewRig(t, g, bucket)
	start := time.Now()
	randomFile(t, filepath.Join(r.dir, "data", "big.bin"), size, 42)
	t.Logf("generated %d bytes in %s", int64(size), time.Since(start).Round(time.Millisecond))
	chunk := os.Getenv("GCS_CHUNK")
	if chunk == "" {
		chunk = "64MiB"
	}
	p := gcsPipelines{bucket: bucket, endpoint: g.Endpoint, root: "large",
		sink: fmt.Sprintf("chunk_size = %q", chunk), source: `part_size = "16MiB"
    concurrency = 4`}
	r.file(t, "p.hcl", []byte(p.String()))
	_, tb := r.run(t, nil, "p.hcl", "backup")
	t.Logf("backup: %s (%s)", tb.Round(time.Millisecond), gcsRate(size, tb))
	_, tr := r.run(t, nil, "p.hcl", "restore")
	t.Logf("restore: %s (%s)", tr.Round(time.Millisecond), gcsRate(size, tr))
	sameTree(t, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "out"))
}

// gcsFaultData is a backup large enough to be in flight when a fault
// strikes: one 24 MiB object (24 upload chunks of 1 MiB) and small ones.
func gcsFaultData(t *testing.T, r *gcsRig) {
	randomFile(t, filepath.Join(r.dir, "data", "big"), 24<<20, 7)
	for i := 0; i < 3; i++ {
		randomFile(t, filepath.Join(r.dir, "data", fmt.Sprintf("small-%d", i)), int64(1000*i), uint64(i))
	}
}

func gcsClearToxics(t *testing.T, p *proxy) {
	t.Helper()
	toxics, err := p.Toxics()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range toxics {
		if err := p.RemoveToxic(x.Name); err != nil {
			t.Fatal(err)
		}
	}
}

func gcsToxic(t *testing.T, p *proxy, name, typ, stream string, attrs toxiclient.Attributes) {
	t.Helper()
	if _, err := p.AddToxic(name, typ, stream, 1, attrs); err != nil {
		t.Fatalf("toxic %s: %v", name, err)
	}
}

// TestGCSFaults runs backups (and a restore) through Toxiproxy while the
// network misbehaves. Each run either succeeds and restores identical
// bytes, or fails with a clear error and leaves no manifest and no object.
func TestGCSFaults(t *testing.T) {
	g := gcsStart(t)
	bucket := g.bucket(t, "faults")
	px := gcsProxy(t, g)
	through := "http://" + px.HostPort
	for _, tc := range []struct {
		name string
		// before runs before the backup starts, during once it writes objects.
		before, during func(t *testing.T, p *proxy)
		sink           string
		want           string // "ok", "fail" or "either"
		errText        []string
	}{
		{name: "latency", want: "ok", before: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "lat-up", "latency", "upstream", toxiclient.Attributes{"latency": 150, "jitter": 50})
			gcsToxic(t, p, "lat-down", "latency", "downstream", toxiclient.Attributes{"latency": 150, "jitter": 50})
		}},
		{name: "bandwidth", want: "ok", before: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "bw", "bandwidth", "upstream", toxiclient.Attributes{"rate": 4096})
		}},
		// Connections are reset for 2 s in the middle of the upload: the
		// chunks in flight are sent again.
		{name: "reset-mid-upload", want: "either", before: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "bw", "bandwidth", "upstream", toxiclient.Attributes{"rate": 4096})
		}, during: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "reset", "reset_peer", "upstream", toxiclient.Attributes{"timeout": 0})
			time.Sleep(2 * time.Second)
			if err := p.RemoveToxic("reset"); err != nil {
				t.Error(err)
			}
		}, errText: []string{"gs://faults/reset-mid-upload/"}},
		// The link goes silent for 3 s: requests stall, are abandoned
		// after the 2 s timeout and tried again.
		{name: "stall-then-recover", want: "ok", sink: `timeout = "2s"`, before: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "bw", "bandwidth", "upstream", toxiclient.Attributes{"rate": 4096})
		}, during: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "silence", "timeout", "upstream", toxiclient.Attributes{"timeout": 0})
			time.Sleep(3 * time.Second)
			if err := p.RemoveToxic("silence"); err != nil {
				t.Error(err)
			}
		}},
		// The link goes silent for good: the run fails within the
		// timeout and retries, and says so.
		{name: "stall-forever", want: "fail", sink: "timeout = \"2s\"\n    retries = 2", before: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "bw", "bandwidth", "upstream", toxiclient.Attributes{"rate": 4096})
		}, during: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "silence", "timeout", "upstream", toxiclient.Attributes{"timeout": 0})
		}, errText: []string{"no byte moved for 2s (timeout)", "gs://faults/stall-forever/", "raise timeout"}},
		// The server's side closes every connection after 1 s of silence
		// from it, for good.
		{name: "timeout-toxic", want: "fail", sink: "timeout = \"5s\"\n    retries = 2", before: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "bw", "bandwidth", "upstream", toxiclient.Attributes{"rate": 4096})
		}, during: func(t *testing.T, p *proxy) {
			gcsToxic(t, p, "close", "timeout", "downstream", toxiclient.Attributes{"timeout": 1000})
		}, errText: []string{"gs://faults/timeout-toxic/"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gcsClearToxics(t, px)
			defer gcsClearToxics(t, px)
			r := gcsNewRig(t, g, bucket)
			gcsFaultData(t, r)
			p := gcsPipelines{bucket: bucket, endpoint: through, root: tc.name,
				sink: "chunk_size = \"1MiB\"\n    " + tc.sink, source: `part_size = "1MiB"`}
			r.file(t, "p.hcl", []byte(p.String()))
			if tc.before != nil {
				tc.before(t, px)
			}
			start := time.Now()
			w := startPipe(t, r.dir, nil, "run", "p.hcl", "--pipeline", "backup", "--progress", "never")
			if tc.during != nil {
				w.moved(t, "sink gcs", "in", 2<<20) // past the bucket check, the first 1 MiB upload chunk on its way
				tc.during(t, px)
			}
			res := w.wait()
			took := time.Since(start)
			gcsClearToxics(t, px)
			manifests, objects := r.manifests(t, tc.name+"/"), g.list(t, bucket, tc.name+"/")
			if res.Err != nil {
				t.Logf("backup failed after %s: %s", took.Round(time.Millisecond), gcsLastLine(res.Stderr))
				if tc.want == "ok" {
					t.Fatalf("the backup failed:\n%s", res.Stderr)
				}
				for _, w := range tc.errText {
					if !strings.Contains(res.Stderr, w) {
						t.Errorf("the error does not say %q:\n%s", w, res.Stderr)
					}
				}
				if len(manifests) != 0 {
					t.Fatalf("a failed run left a manifest: %v", manifests)
				}
				// Objects that were committed before the failure are
				// taken back; when the network is gone for good that
				// fails too (pipe says so), as does a commit whose answer
				// was lost and whose object could not be checked; what
				// stays must be whole.
				for _, k := range objects {
					removing := strings.Contains(res.Stderr, "removing \""+k+"\" after the failure")
					unknown := strings.Contains(res.Stderr, "gs://"+bucket+"/"+k+": ") && strings.Contains(res.Stderr, "may be stored nevertheless")
					if !removing && !unknown {
						t.Errorf("%s was left behind without a word:\n%s", k, res.Stderr)
					}
					r.wholeObject(t, k)
				}
				return
			}
			t.Logf("backup succeeded in %s", took.Round(time.Millisecond))
			if tc.want == "fail" {
				t.Fatalf("the backup succeeded:\n%s", res.Stderr)
			}
			if objects = withoutIndex(t, objects, tc.name+"/backup/"); len(manifests) != 1 || len(objects) != 5 {
				t.Fatalf("manifests %v, objects %v", manifests, objects)
			}
			r.run(t, nil, "p.hcl", "restore")
			sameTree(t, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "out"))
		})
	}

	// SIGINT in the middle of the upload: pipe aborts the uploads in
	// flight (nothing appears) and takes back the objects it committed.
	t.Run("interrupted", func(t *testing.T) {
		gcsClearToxics(t, px)
		defer gcsClearToxics(t, px)
		r := gcsNewRig(t, g, bucket)
		gcsFaultData(t, r)
		p := gcsPipelines{bucket: bucket, endpoint: through, root: "interrupted", sink: `chunk_size = "1MiB"`}
		r.file(t, "p.hcl", []byte(p.String()))
		gcsToxic(t, px, "bw", "bandwidth", "upstream", toxiclient.Attributes{"rate": 4096})
		w := startPipe(t, r.dir, nil, "run", "p.hcl", "--pipeline", "backup", "--progress", "never")
		w.moved(t, "sink gcs", "in", 2<<20) // the first 1 MiB upload chunk is on its way
		start := time.Now()
		w.cmd.Process.Signal(os.Interrupt)
		res := w.wait()
		t.Logf("stopped %s after SIGINT: %v", time.Since(start).Round(time.Millisecond), res.Err)
		if code := w.cmd.ProcessState.ExitCode(); code != 130 {
			t.Fatalf("exit %d (%v), want 130:\n%s", code, res.Err, res.Stderr)
		}
		if objects := g.list(t, bucket, "interrupted/"); len(objects) != 0 {
			t.Fatalf("an interrupted run left %v:\n%s", objects, res.Stderr)
		}
	})

	// A restore through a link that resets connections for a while: the
	// ranges in flight are read again.
	t.Run("reset-mid-restore", func(t *testing.T) {
		gcsClearToxics(t, px)
		defer gcsClearToxics(t, px)
		r := gcsNewRig(t, g, bucket)
		gcsFaultData(t, r)
		p := gcsPipelines{bucket: bucket, endpoint: through, root: "reset-mid-restore", sink: `chunk_size = "8MiB"`, source: `part_size = "1MiB"`}
		r.file(t, "p.hcl", []byte(p.String()))
		r.run(t, nil, "p.hcl", "backup")
		gcsToxic(t, px, "bw", "bandwidth", "downstream", toxiclient.Attributes{"rate": 4096})
		start := time.Now()
		w := startPipe(t, r.dir, nil, "run", "p.hcl", "--pipeline", "restore", "--progress", "never")
		w.moved(t, "source", "out", 1) // ranges are being read
		gcsToxic(t, px, "reset", "reset_peer", "downstream", toxiclient.Attributes{"timeout": 0})
		time.Sleep(time.Second)
		if err := px.RemoveToxic("reset"); err != nil {
			t.Fatal(err)
		}
		res := w.wait()
		if res.Err != nil {
			t.Fatalf("the restore failed: %s", res.Stderr)
		}
		t.Logf("restore succeeded in %s", time.Since(start).Round(time.Millisecond))
		sameTree(t, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "out"))
	})
}

func gcsProxy(t *testing.T, g *gcsServer) *proxy {
	return startToxiproxy(t, g.IP+":4443")
}

// gcsLastLine is the error line of pipe's output.
func gcsLastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "Error:") {
			return lines[i]
		}
	}
	return lines[len(lines)-1]
}

// wholeObject fails unless the object at key is a complete zstd stream of
// the data file it was made from.
func (r *gcsRig) wholeObject(t *testing.T, key string) {
	t.Helper()
	stored, ok := r.g.get(r.bucket, key)
	if !ok {
		t.Fatalf("%s: cannot read it", key)
	}
	d, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	got, err := d.DecodeAll(stored, nil)
	want, rerr := os.ReadFile(filepath.Join(r.dir, "data", strings.TrimSuffix(path.Base(key), ".zst")))
	if err != nil || rerr != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s is not a whole copy of its data (%d bytes, %v, %v)", key, len(got), err, rerr)
	}
}

func TestGCSRetention(t *testing.T) {
	g := gcsStart(t)
	bucket := g.bucket(t, "retention")
	r := gcsNewRig(t, g, bucket)
	r.file(t, "data/a", randomBytes(1, 5000))
	r.file(t, "data/b", randomBytes(2, 70000))
	p := gcsPipelines{bucket: bucket, endpoint: g.Endpoint, root: "ret", sink: "keep_last = 2"}
	r.file(t, "p.hcl", []byte(p.String()))
	var runs []string
	var res result
	for i := 0; i < 3; i++ {
		res, _ = r.run(t, nil, "p.hcl", "backup")
		runs = append(runs, gcsRunID(t, res.Stderr))
	}
	if !strings.Contains(res.Stderr, "kept 2 runs, deleted 1 run") {
		t.Errorf("the summary does not report the retention:\n%s", res.Stderr)
	}
	keys := withoutIndex(t, g.list(t, bucket, "ret/"), "ret/backup/")
	var left []string
	for _, m := range r.manifests(t, "ret/backup/") {
		left = append(left, strings.Split(m, "/")[2])
	}
	want := append([]string(nil), runs[1:]...)
	sort.Strings(want)
	if strings.Join(left, " ") != strings.Join(want, " ") {
		t.Fatalf("runs left %v, want the last two %v; objects:\n%s", left, want, strings.Join(keys, "\n"))
	}
	// The kept runs are whole (2 objects and a manifest each); the first
	// is gone entirely.
	if len(keys) != 2*3 {
		t.Fatalf("%d objects, want 2 runs of 3 objects:\n%s", len(keys), strings.Join(keys, "\n"))
	}
	res, _ = r.run(t, nil, "p.hcl", "restore")
	if !strings.Contains(res.Stderr, runs[2]) {
		t.Errorf("the restore did not take the newest run %s:\n%s", runs[2], res.Stderr)
	}
	sameTree(t, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "out"))
}

// gcsRunID is the run id a summary names.
func gcsRunID(t *testing.T, stderr string) string {
	t.Helper()
	i := strings.Index(stderr, "· run ")
	if i < 0 {
		t.Fatalf("no run id in %s", stderr)
	}
	return strings.Fields(stderr[i+len("· run "):])[0]
}

// TestGCSSecrets runs pipe with service account credentials (a real key,
// a token endpoint of the test's own): they work, and neither they nor
// the access token appear in any output, plan or manifest; refused
// credentials fail with a clear error that does not repeat them either.
func TestGCSSecrets(t *testing.T) {
	g := gcsStart(t)
	bucket := g.bucket(t, "secrets")
	const token = "ya29.ACCESS-TOKEN-MARKER-7f3a9c"
	var grants atomic.Int64
	tokens := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.ParseForm()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/token" || r.Form.Get("assertion") == "" {
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`)
			return
		}
		grants.Add(1)
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, token)
	}))
	defer tokens.Close()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKCS8PrivateKey(k)
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	creds := func(tokenURI string) string {
		b, _ := json.Marshal(map[string]string{"type": "service_account", "project_id": "proj",
			"private_key_id": "KEYID-MARKER-0123456789", "private_key": keyPEM,
			"client_email": "backup@proj.iam.gserviceaccount.com", "client_id": "1234567890",
			"token_uri": tokenURI})
		return string(b)
	}
	good, bad := creds(tokens.URL+"/token"), creds(tokens.URL+"/refuse")
	secrets := []string{token, "KEYID-MARKER-0123456789", good, bad}
	for _, line := range strings.Split(keyPEM, "\n") {
		if len(line) > 16 && !strings.HasPrefix(line, "-----") {
			secrets = append(secrets, line)
		}
	}
	leaks := func(what, text string) {
		t.Helper()
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s repeats a secret (%.24q…):\n%s", what, s, text)
			}
		}
	}

	r := gcsNewRig(t, g, bucket)
	r.file(t, "data/a", randomBytes(3, 300_000))
	r.file(t, "data/b", []byte("hello"))
	r.file(t, "keys/sa.json", []byte(good))
	inline := gcsPipelines{bucket: bucket, endpoint: g.Endpoint, root: "inline",
		prelude: "variable \"gcs_credentials\" { sensitive = true }\n",
		sink:    "credentials_json = var.gcs_credentials", source: "credentials_json = var.gcs_credentials"}
	fromFile := gcsPipelines{bucket: bucket, endpoint: g.Endpoint, root: "file",
		sink: `credentials_file = "keys/sa.json"`, source: `credentials_file = "keys/sa.json"`}
	r.file(t, "inline.hcl", []byte(inline.String()))
	r.file(t, "file.hcl", []byte(fromFile.String()))
	env := []string{"PIPE_VAR_gcs_credentials=" + good}

	for _, file := range []string{"inline.hcl", "file.hcl"} {
		for _, args := range [][]string{{"validate", file}, {"plan", file}, {"plan", file, "--json"}} {
			res := mustPipe(t, r.dir, env, args...)
			leaks(strings.Join(args, " "), res.Stdout+res.Stderr)
		}
		res := mustPipe(t, r.dir, env, "run", file, "--pipeline", "backup", "--json")
		leaks(file+" backup", res.Stdout+res.Stderr)
		res, _ = r.run(t, env, file, "restore")
		leaks(file+" restore", res.Stdout+res.Stderr)
		sameTree(t, filepath.Join(r.dir, "data"), filepath.Join(r.dir, "out"))
		os.RemoveAll(filepath.Join(r.dir, "out"))
	}
	if plan := mustPipe(t, r.dir, env, "plan", "inline.hcl"); !strings.Contains(plan.Stdout, "credentials_json = (sensitive)") {
		t.Errorf("the plan does not show the credentials as sensitive:\n%s", plan.Stdout)
	}
	if grants.Load() == 0 {
		t.Fatal("the credentials were never used")
	}
	for _, key := range g.list(t, bucket, "") {
		b, _ := g.get(bucket, key)
		if strings.HasSuffix(key, ".json") {
			leaks("manifest "+key, string(b))
		}
	}

	// Refused credentials: a clear error, nothing repeated, nothing stored.
	res := runPipe(t, r.dir, []string{"PIPE_VAR_gcs_credentials=" + bad}, "run", "inline.hcl", "--pipeline", "backup", "--progress", "never")
	if res.Err == nil {
		t.Fatal("a backup with refused credentials succeeded")
	}
	leaks("the refused backup", res.Stdout+res.Stderr)
	for _, w := range []string{"gs://secrets", "getting an access token failed", "invalid_grant", "check the credentials (the credentials of credentials_json)"} {
		if !strings.Contains(res.Stderr, w) {
			t.Errorf("the error does not say %q:\n%s", w, res.Stderr)
		}
	}
	t.Logf("refused: %s", gcsLastLine(res.Stderr))
	if n := len(r.manifests(t, "inline/")); n != 1 {
		t.Errorf("%d manifests under inline/, want the one good run", n)
	}
}

// TestGCSErrors: mistakes a user makes fail before any byte moves, at the
// attribute's position or naming the bucket and object, with what to do.
func TestGCSErrors(t *testing.T) {
	g := gcsStart(t)
	bucket := g.bucket(t, "errors")
	r := gcsNewRig(t, g, bucket)
	r.file(t, "data/a", []byte("abc"))
	closed := func() string { // an address nothing listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return "http://" + l.Addr().String()
	}()
	for _, tc := range []struct {
		name, pipeline string
		p              gcsPipelines
		want           []string
	}{
		{"no such bucket", "backup", gcsPipelines{bucket: "nosuch", endpoint: g.Endpoint, root: "x"},
			[]string{"checking the bucket gs://nosuch: the bucket does not exist", "gcloud storage buckets create gs://nosuch"}},
		{"nothing under the prefix", "restore", gcsPipelines{bucket: bucket, endpoint: g.Endpoint, root: "empty"},
			[]string{"gs://errors/empty/backup/*: no objects: check bucket and prefix"}},
		{"unreachable", "backup", gcsPipelines{bucket: bucket, endpoint: closed, root: "x", sink: "retries = 1"},
			[]string{"cannot reach 127.0.0.1:", "check endpoint"}},
		{"bucket as a URL", "backup", gcsPipelines{bucket: "gs://errors/pg", endpoint: g.Endpoint, root: "x"},
			[]string{"p.hcl:", `write the bucket's name without gs:// (bucket = "errors")`}},
		{"chunk too small", "backup", gcsPipelines{bucket: bucket, endpoint: g.Endpoint, root: "x", sink: `chunk_size = "100KiB"`},
			[]string{"p.hcl:", "chunk_size", "between 256KiB and 1GiB"}},
		{"endpoint without scheme", "restore", gcsPipelines{bucket: bucket, endpoint: "localhost:4443", root: "x"},
			[]string{"p.hcl:", "write http://localhost:4443 for an emulator"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r.file(t, "p.hcl", []byte(tc.p.String()))
			start := time.Now()
			res := runPipe(t, r.dir, nil, "run", "p.hcl", "--pipeline", tc.pipeline, "--progress", "never")
			if res.Err == nil {
				t.Fatalf("succeeded:\n%s", res.Stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Stderr, w) {
					t.Errorf("the error does not say %q:\n%s", w, res.Stderr)
				}
			}
			t.Logf("%s: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(res.Stderr))
		})
	}
}

// object_lock_days sets object retention on every object a run writes
// (the index and pins aside), in the upload itself; retention and prune
// delete no run still retained, and verify --locks proves the lock.
func TestGCSObjectLock(t *testing.T) {
	g := gcsStart(t)
	bucket := g.bucket(t, "locked")
	r := gcsNewRig(t, g, bucket)
	r.file(t, "data/a", randomBytes(1, 5000))
	p := gcsPipelines{bucket: bucket, endpoint: g.Endpoint, root: "lock", sink: "object_lock_days = 2\n    keep_last = 1"}
	r.file(t, "p.hcl", []byte(p.String()))
	var res result
	for i := 0; i < 3; i++ {
		res, _ = r.run(t, nil, "p.hcl", "backup")
	}
	if !strings.Contains(res.Stderr, "waits: the store locks it") {
		t.Errorf("the summary does not say the older runs wait for their lock:\n%s", res.Stderr)
	}
	keys := g.list(t, bucket, "lock/")
	if len(keys) != 3*2+1 { // three runs (an object and its manifest each) and the index
		t.Errorf("%d objects after 3 runs with keep_last = 1 but locked, want 7:\n%s", len(keys), strings.Join(keys, "\n"))
	}
	for _, k := range keys {
		a, err := g.c.Bucket(bucket).Object(k).Attrs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(k, "pipe-index.json") {
			if a.Retention != nil {
				t.Errorf("the index %s is retained: %+v", k, a.Retention)
			}
			continue
		}
		if a.Retention == nil || a.Retention.Mode != "Locked" || time.Until(a.Retention.RetainUntil) < 47*time.Hour {
			t.Errorf("%s is not retained (Locked) for two days: %+v", k, a.Retention)
		}
	}
	out := mustPipe(t, r.dir, nil, "backups", "prune", "p.hcl")
	if n := strings.Count(out.Stdout, "wait: run "); n != 2 {
		t.Errorf("prune lists %d runs waiting, want 2:\n%s", n, out.Stdout)
	}
	out = mustPipe(t, r.dir, nil, "verify", "p.hcl", "--pipeline", "backup", "--all", "--locks")
	if n := strings.Count(out.Stdout, "locked (compliance) until at least"); n != 3 {
		t.Errorf("verify --locks proves %d runs locked, want 3:\n%s", n, out.Stdout)
	}
}
