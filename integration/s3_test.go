package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	toxiclient "github.com/Shopify/toxiproxy/v2/client"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/conformance"
	"github.com/pipebackup/pipe/plugins/sdk"
	s3plugin "github.com/pipebackup/pipe/plugins/storage/s3"
)

const s3MiB = 1 << 20

// s3Bench is a MinIO server and an admin client that looks at what the
// plugin did there.
type s3Bench struct {
	m      *minioServer
	client *s3.Client
}

func newS3Bench(t *testing.T) *s3Bench {
	t.Helper()
	m := startMinIO(t)
	c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(m.Endpoint), UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(m.User, m.Pass, "")})
	return &s3Bench{m: m, client: c}
}

func (b *s3Bench) bucket(t *testing.T, name string) string {
	t.Helper()
	if _, err := b.client.CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &name}); err != nil {
		t.Fatal(err)
	}
	return name
}

func (b *s3Bench) put(t *testing.T, bucket, key string, data []byte) {
	t.Helper()
	if _, err := b.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(data)}); err != nil {
		t.Fatal(err)
	}
}

func (b *s3Bench) get(bucket, key string) ([]byte, bool) {
	out, err := b.client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &bucket, Key: &key})
	if err != nil {
		return nil, false
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	return data, err == nil
}

func (b *s3Bench) keys(t *testing.T, bucket, prefix string) []string {
	t.Helper()
	var keys []string
	p := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{Bucket: &bucket, Prefix: &prefix})
	for p.HasMorePages() {
		page, err := p.NextPage(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.Contents {
			keys = append(keys, *o.Key)
		}
	}
	sort.Strings(keys)
	return keys
}

// readManifest returns the one manifest under prefix.
func (b *s3Bench) readManifest(t *testing.T, bucket, prefix string) *manifest.Manifest {
	t.Helper()
	var found []string
	for _, k := range b.keys(t, bucket, prefix) {
		if strings.HasSuffix(k, pipefile.ManifestName) {
			found = append(found, k)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one manifest under %s, have %v", prefix, found)
	}
	data, _ := b.get(bucket, found[0])
	m, err := manifest.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// uploads lists the multipart uploads in progress in the bucket (MinIO
// lists them all with an empty prefix, not those under a folder).
func (b *s3Bench) uploads(t *testing.T, bucket string) []string {
	t.Helper()
	out, err := b.client.ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: &bucket, Prefix: aws.String("")})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, u := range out.Uploads {
		keys = append(keys, *u.Key)
	}
	return keys
}

// noUploads fails the test if a multipart upload is left in the bucket,
// after checking that the listing would show one.
func (b *s3Bench) noUploads(t *testing.T, bucket string) {
	t.Helper()
	ctx := context.Background()
	probe := "probe/" + t.Name()
	up, err := b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: &bucket, Key: &probe})
	if err != nil {
		t.Fatal(err)
	}
	seen := b.uploads(t, bucket)
	b.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &probe, UploadId: up.UploadId})
	if len(seen) == 0 {
		t.Fatal("ListMultipartUploads does not show uploads in progress here; the check would prove nothing")
	}
	if left := b.uploads(t, bucket); len(left) > 0 {
		t.Fatalf("multipart uploads left in bucket %s: %v", bucket, left)
	}
}

// config is an s3 endpoint's settings for the bucket at endpoint.
func (b *s3Bench) config(bucket, endpoint string, extra map[string]any) map[string]any {
	c := map[string]any{"bucket": bucket, "endpoint": endpoint, "path_style": true, "region": "us-east-1",
		"access_key_id": b.m.User, "secret_access_key": b.m.Pass,
		"part_size": int64(5 * s3MiB), "concurrency": int64(3), "retries": int64(3)}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

type s3Store struct {
	b      *s3Bench
	bucket string
	prefix string
}

func (s s3Store) Key(name string) string         { return s.prefix + name }
func (s s3Store) Read(key string) ([]byte, bool) { return s.b.get(s.bucket, key) }

// The conformance suite, in-process and through the plugin protocol, with
// a slow sink and an endless source behind a bandwidth-limited proxy and a
// wrong secret key for the secrets case.
func TestS3Conformance(t *testing.T) {
	b := newS3Bench(t)
	bucket := b.bucket(t, "conformance")
	px := startToxiproxy(t, b.m.IP+":9000")
	for _, dir := range []string{"upstream", "downstream"} {
		if _, err := px.AddToxic("slow-"+dir, "bandwidth", dir, 1, toxiclient.Attributes{"rate": 1024}); err != nil {
			t.Fatal(err)
		}
	}
	slow := "http://" + px.HostPort
	// An object that takes a minute through the proxy: endless for the test.
	b.put(t, bucket, "endless/stream", randomBytes(1, 64*s3MiB))

	reg := conformance.Remote(t, all.Builtin())
	remoteSource, err := reg.Source("s3")
	if err != nil || remoteSource == nil {
		t.Fatalf("remote s3 source: %v", err)
	}
	remoteSink, err := reg.Sink("s3")
	if err != nil || remoteSink == nil {
		t.Fatalf("remote s3 sink: %v", err)
	}
	var n int
	var mu sync.Mutex
	fresh := func(kind string) string {
		mu.Lock()
		defer mu.Unlock()
		n++
		return fmt.Sprintf("%s-%03d/", kind, n)
	}
	t.Run("wal archive", func(t *testing.T) {
		missing, _ := s3plugin.SinkType{}.Configure(context.Background(), sdk.NewConfig(b.config("no-such-bucket", b.m.Endpoint, nil)))
		walStoreSuite(t, configure(t, s3plugin.SinkType{}.Configure, b.config(bucket, b.m.Endpoint, nil)), fresh("wal"), missing)
	})
	for name, ty := range map[string]struct {
		source sdk.SourceType
		sink   sdk.SinkType
	}{"in-process": {s3plugin.SourceType{}, s3plugin.SinkType{}}, "plugin": {remoteSource, remoteSink}} {
		t.Run(name+"/source", func(t *testing.T) {
			conformance.RunSource(t, conformance.Source{
				New: func(t *testing.T, streams map[string][]byte) sdk.Source {
					prefix := fresh("src")
					for n, data := range streams {
						b.put(t, bucket, prefix+n, data)
					}
					return configure(t, ty.source.Configure, b.config(bucket, b.m.Endpoint, map[string]any{"prefix": prefix}))
				},
				Endless: func(t *testing.T) (sdk.Source, string) {
					return configure(t, ty.source.Configure, b.config(bucket, slow, map[string]any{"prefix": "endless/", "part_size": int64(s3MiB), "concurrency": int64(2)})), "stream"
				},
				Failing: func(t *testing.T, secret string) (sdk.Source, string) {
					return configure(t, ty.source.Configure, b.config(bucket, b.m.Endpoint, map[string]any{"prefix": "endless/", "secret_access_key": secret})), "stream"
				},
			})
		})
		t.Run(name+"/sink", func(t *testing.T) {
			conformance.RunSink(t, conformance.Sink{
				New: func(t *testing.T) (sdk.Sink, conformance.Store) {
					return configure(t, ty.sink.Configure, b.config(bucket, b.m.Endpoint, nil)), s3Store{b, bucket, fresh("sink")}
				},
				Slow: func(t *testing.T) sdk.Sink {
					return configure(t, ty.sink.Configure, b.config(bucket, slow, map[string]any{"concurrency": int64(2)}))
				},
				Failing: func(t *testing.T, secret string) sdk.Sink {
					return configure(t, ty.sink.Configure, b.config(bucket, b.m.Endpoint, map[string]any{"secret_access_key": secret}))
				},
				Exclusive: true,
			})
		})
	}
	// Aborted and cancelled objects, and the slow one, left nothing.
	s3WaitNoUploads(t, b, bucket)
}

// s3WaitNoUploads waits a little for aborts that run in the background (a
// cancelled context aborts its upload without anyone waiting for it).
func s3WaitNoUploads(t *testing.T, b *s3Bench, bucket string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second && len(b.uploads(t, bucket)) > 0; {
		time.Sleep(100 * time.Millisecond)
	}
	b.noUploads(t, bucket)
}

// pipeline files for the CLI tests: the s3 endpoints take their settings
// from variables, the credentials from sensitive ones.
const s3Vars = `
variable "endpoint" {}
variable "bucket" {}
variable "access_key" { sensitive = true }
variable "secret_key" { sensitive = true }
variable "part_size" { default = "5MiB" }
variable "concurrency" { default = 3 }
variable "timeout" { default = "30s" }
variable "retries" { default = 8 }
`

func s3Block(kind, where string) string {
	return fmt.Sprintf(`%s "s3" {
    bucket            = var.bucket
    %s
    endpoint          = var.endpoint
    path_style        = true
    access_key_id     = var.access_key
    secret_access_key = var.secret_key
    part_size         = var.part_size
    concurrency       = var.concurrency
    timeout        = var.timeout
    retries       = var.retries
  }`, kind, where)
}

// s3Env is the environment of a pipe run against bucket at endpoint.
func (b *s3Bench) env(bucket, endpoint string, more ...string) []string {
	return append([]string{"PIPE_VAR_endpoint=" + endpoint, "PIPE_VAR_bucket=" + bucket,
		"PIPE_VAR_access_key=" + b.m.User, "PIPE_VAR_secret_key=" + b.m.Pass, "AWS_EC2_METADATA_DISABLED=true"}, more...)
}

func s3RoundTripFile(stages string) string {
	return s3Vars + `
variable "streams" { default = 4 }
pipeline "backup" {
  streams    = var.streams
  chunk_size = "1MiB"
  source "fs" { path = "data" }
` + stages + `
  ` + s3Block("sink", `key = "rt/${pipeline.name}/${run.id}/"`) + `
}
pipeline "restore" {
  streams = var.streams
  ` + s3Block("source", `prefix = "rt/backup/"`) + `
` + s3RestoreStages(stages) + `
  sink "fs" { path = "out/" }
}
`
}

func s3RestoreStages(stages string) string {
	var out []string
	if strings.Contains(stages, "encrypt") {
		out = append(out, `  decrypt { identities = [file("keys/backup.key")] }`)
	}
	if strings.Contains(stages, "compress") {
		out = append(out, `  decompress {}`)
	}
	return strings.Join(out, "\n")
}

const s3FullStages = `
  compress {
    codec = "zstd"
    level = 1
  }
  encrypt { recipients = [file("keys/backup.pub")] }
  checksum {}
`

// backupRestore backs dir/data up to the bucket and restores it into
// dir/out, which must then hold the same bytes.
func (b *s3Bench) backupRestore(t *testing.T, dir, bucket, stages string, env ...string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, "p.hcl"), []byte(s3RoundTripFile(stages)))
	if strings.Contains(stages, "encrypt") {
		mustPipe(t, dir, nil, "keygen", "-o", "keys/backup", "--if-missing")
	}
	e := b.env(bucket, b.m.Endpoint, env...)
	start := time.Now()
	mustPipe(t, dir, e, "run", "p.hcl", "--pipeline", "backup")
	backup := time.Since(start)
	mustPipe(t, dir, e, "run", "p.hcl", "--pipeline", "restore")
	t.Logf("backup %s, restore %s", backup.Round(time.Millisecond), (time.Since(start) - backup).Round(time.Millisecond))
	sameTree(t, filepath.Join(dir, "data"), filepath.Join(dir, "out"))
	b.noUploads(t, bucket)
}

// Backups through the CLI to MinIO, restored from the bucket's manifest:
// boundary sizes, 1 GiB, and 100 streams at once.
func TestS3RoundTrip(t *testing.T) {
	b := newS3Bench(t)

	t.Run("sizes", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "data/empty"), nil)
		writeFile(t, filepath.Join(dir, "data/part-plus-one"), randomBytes(2, 5*s3MiB+1))
		writeFile(t, filepath.Join(dir, "data/one-part"), randomBytes(3, 5*s3MiB))
		writeFile(t, filepath.Join(dir, "data/one-byte"), []byte{7})
		b.backupRestore(t, dir, b.bucket(t, "sizes"), s3FullStages)

		// Without stages the stored objects have exactly these sizes: an
		// empty object, one PutObject of a whole part, a multipart upload
		// of a part and a byte.
		dir2 := t.TempDir()
		os.Rename(filepath.Join(dir, "data"), filepath.Join(dir2, "data"))
		bucket := b.bucket(t, "exact")
		b.backupRestore(t, dir2, bucket, "  checksum {}\n")
		for _, k := range b.keys(t, bucket, "rt/") {
			head, err := b.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: &k})
			if err != nil {
				t.Fatal(err)
			}
			multipart := strings.Contains(aws.ToString(head.ETag), "-")
			if want := strings.HasSuffix(k, "part-plus-one"); multipart != want {
				t.Errorf("%s (%d bytes): multipart %v", k, aws.ToInt64(head.ContentLength), multipart)
			}
		}

		// Each object downloaded on its own, without stages: the s3
		// plugin writes its ranges straight into the fs sink's file.
		// And each file uploaded on its own, without stages: the s3
		// plugin reads the file pipe hands it, its parts from their
		// places in the file.
		writeFile(t, filepath.Join(dir2, "raw.hcl"), []byte(s3Vars+`
variable "key" {}
variable "file" { default = "data" }
variable "out" { default = "raw/" }
pipeline "raw" {
  `+s3Block("source", `key = var.key`)+`
  sink "fs" {
    path      = var.out
    overwrite = true # one folder takes every download (and its manifest)
  }
}
pipeline "up" {
  source "fs" { path = var.file }
  `+s3Block("sink", `key = var.key`)+`
}
`))
		for _, k := range b.keys(t, bucket, "rt/") {
			name := path.Base(k)
			if name == "pipe-manifest.json" || name == indexName {
				continue
			}
			want, _ := os.ReadFile(filepath.Join(dir2, "data", name))
			mustPipe(t, dir2, b.env(bucket, b.m.Endpoint, "PIPE_VAR_key="+k), "run", "raw.hcl", "--pipeline", "raw")
			if got, err := os.ReadFile(filepath.Join(dir2, "raw", name)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s downloaded: %d bytes, want %d (%v)", k, len(got), len(want), err)
			}
			up := "up/" + name
			mustPipe(t, dir2, b.env(bucket, b.m.Endpoint, "PIPE_VAR_key="+up, "PIPE_VAR_file=data/"+name), "run", "raw.hcl", "--pipeline", "up")
			mustPipe(t, dir2, b.env(bucket, b.m.Endpoint, "PIPE_VAR_key="+up, "PIPE_VAR_out=raw-up/"), "run", "raw.hcl", "--pipeline", "raw")
			if got, err := os.ReadFile(filepath.Join(dir2, "raw-up", name)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s uploaded: %d bytes back, want %d (%v)", name, len(got), len(want), err)
			}
			head, err := b.client.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: &bucket, Key: &up})
			if err != nil {
				t.Fatal(err)
			}
			if multipart, want := strings.Contains(aws.ToString(head.ETag), "-"), name == "part-plus-one"; multipart != want {
				t.Errorf("%s uploaded: multipart %v", up, multipart)
			}
		}
		b.noUploads(t, bucket)
	})

	t.Run("1GiB", func(t *testing.T) {
		dir := t.TempDir()
		randomFile(t, filepath.Join(dir, "data", "big"), 1<<30, 4)
		b.backupRestore(t, dir, b.bucket(t, "big"), s3FullStages, "PIPE_VAR_part_size=16MiB", "PIPE_VAR_concurrency=4")
	})

	t.Run("100 streams", func(t *testing.T) {
		dir := t.TempDir()
		r := rand.New(rand.NewPCG(5, 5))
		for i := 0; i < 100; i++ {
			writeFile(t, filepath.Join(dir, fmt.Sprintf("data/d%d/file-%03d", i%7, i)), randomBytes(uint64(100+i), r.IntN(400_000)))
		}
		writeFile(t, filepath.Join(dir, "data/large"), randomBytes(6, 12*s3MiB))
		b.backupRestore(t, dir, b.bucket(t, "many"), s3FullStages, "PIPE_VAR_streams=100", "PIPE_VAR_concurrency=2")
	})
}

type s3Toxic struct {
	typ, stream string
	toxicity    float32
	attrs       toxiclient.Attributes
}

func s3AddToxics(t *testing.T, px *proxy, toxics []s3Toxic) func() {
	t.Helper()
	var names []string
	for i, x := range toxics {
		name := fmt.Sprintf("%s-%s-%d", x.typ, x.stream, i)
		if _, err := px.AddToxic(name, x.typ, x.stream, x.toxicity, x.attrs); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	return func() {
		for _, n := range names {
			if err := px.RemoveToxic(n); err != nil {
				t.Error(err)
			}
		}
	}
}

// Network faults between pipe and MinIO, through Toxiproxy. Each backup
// either succeeds and restores (through faults too) byte for byte, or fails
// with an error that says what and where, without a manifest; either way
// no multipart upload is left.
func TestS3Faults(t *testing.T) {
	b := newS3Bench(t)
	px := startToxiproxy(t, b.m.IP+":9000")
	endpoint := "http://" + px.HostPort
	both := func(typ string, toxicity float32, attrs toxiclient.Attributes) []s3Toxic {
		return []s3Toxic{{typ, "upstream", toxicity, attrs}, {typ, "downstream", toxicity, attrs}}
	}
	up := func(rate int) []s3Toxic {
		return []s3Toxic{{"bandwidth", "upstream", 1, toxiclient.Attributes{"rate": rate}}}
	}
	down := func(rate int) []s3Toxic {
		return []s3Toxic{{"bandwidth", "downstream", 1, toxiclient.Attributes{"rate": rate}}}
	}
	// A fault that hits every connection, open ones included, once a run's
	// data moves, for a while.
	type window struct {
		toxics []s3Toxic
		length time.Duration
	}
	stall := func(d time.Duration) *window {
		return &window{both("timeout", 1, toxiclient.Attributes{"timeout": 0}), d}
	}
	reset := &window{both("reset_peer", 1, toxiclient.Attributes{"timeout": 0}), 300 * time.Millisecond}
	type phase struct {
		toxics []s3Toxic
		during *window
	}
	for _, sc := range []struct {
		name            string
		backup, restore phase
		mustSucceed     bool
		env             []string
	}{
		{name: "latency", mustSucceed: true,
			backup:  phase{toxics: both("latency", 1, toxiclient.Attributes{"latency": 150, "jitter": 50})},
			restore: phase{toxics: both("latency", 1, toxiclient.Attributes{"latency": 150, "jitter": 50})}},
		{name: "bandwidth", mustSucceed: true,
			backup:  phase{toxics: up(3000)},
			restore: phase{toxics: down(3000)}},
		// Every connection is reset in the middle of its part (parts take
		// ~650 ms at this rate), and in the middle of its range on restore.
		{name: "reset", mustSucceed: true,
			backup:  phase{toxics: up(8000), during: reset},
			restore: phase{toxics: down(8000), during: reset},
			env:     []string{"PIPE_VAR_retries=10"}},
		// Every connection of the restore is closed after 1.5 MB: each
		// range of 5 MiB is read in pieces, resumed where it broke off.
		{name: "cut", mustSucceed: true,
			restore: phase{toxics: []s3Toxic{{"limit_data", "downstream", 1, toxiclient.Attributes{"bytes": 1_500_000}}}}},
		// Every connection stalls for 2.5 s: timeout drops them and the
		// requests (and ranges) are retried until the network is back.
		{name: "timeout", mustSucceed: true,
			backup:  phase{toxics: up(4000), during: stall(2500 * time.Millisecond)},
			restore: phase{toxics: down(4000), during: stall(2500 * time.Millisecond)},
			env:     []string{"PIPE_VAR_timeout=1s", "PIPE_VAR_retries=10"}},
		// Everything stalls for 5 s, longer than pipe is told to retry: the
		// run fails (or, had it nearly finished, succeeds), and the upload
		// is aborted once the store can be reached again.
		{name: "outage",
			backup: phase{toxics: up(4000), during: stall(5 * time.Second)},
			env:    []string{"PIPE_VAR_timeout=1s", "PIPE_VAR_retries=1"}},
	} {
		t.Run(sc.name, func(t *testing.T) {
			bucket := b.bucket(t, "fault-"+sc.name)
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "data/big"), randomBytes(11, 24*s3MiB+123))
			writeFile(t, filepath.Join(dir, "data/small"), randomBytes(12, 10_000))
			writeFile(t, filepath.Join(dir, "p.hcl"), []byte(s3RoundTripFile("  compress {\n    level = 1\n  }\n  checksum {}\n")))
			env := b.env(bucket, endpoint, sc.env...)
			run := func(pipeline string, ph phase) (result, time.Duration) {
				remove := s3AddToxics(t, px, ph.toxics)
				defer remove()
				start := time.Now()
				w := startPipe(t, dir, env, "run", "p.hcl", "--pipeline", pipeline, "--metrics-textfile", filepath.Join(dir, pipeline+".prom"))
				if ph.during != nil {
					// The backup's first part (5 MiB, more than the small
					// file) is on its way, or the restore's ranges are.
					if pipeline == "backup" {
						w.moved(t, "sink s3", "in", 6*s3MiB)
					} else {
						w.moved(t, "source", "out", 1)
					}
					end := s3AddToxics(t, px, ph.during.toxics)
					time.Sleep(ph.during.length)
					end()
				}
				r := w.wait()
				return r, time.Since(start).Round(time.Millisecond)
			}

			r, took := run("backup", sc.backup)
			t.Logf("backup: %v after %s", r.Err, took)
			manifests := 0
			for _, k := range b.keys(t, bucket, "rt/") {
				if strings.HasSuffix(k, "pipe-manifest.json") {
					manifests++
				}
			}
			if r.Err != nil {
				if sc.mustSucceed {
					t.Fatalf("backup failed: %v\n%s", r.Err, r.Stderr)
				}
				t.Logf("the backup failed as it may:\n%s", r.Stderr)
				if !strings.Contains(r.Stderr, "s3://"+bucket+"/rt/backup/") || !strings.Contains(r.Stderr, "timeout") {
					t.Errorf("the error does not say where and why:\n%s", r.Stderr)
				}
				if manifests != 0 {
					t.Errorf("a failed run left a manifest")
				}
			} else {
				if manifests != 1 {
					t.Fatalf("%d manifests after one backup", manifests)
				}
				r, took := run("restore", sc.restore)
				if r.Err != nil {
					t.Fatalf("restore failed after %s: %v\n%s", took, r.Err, r.Stderr)
				}
				t.Logf("restore: %s", took)
				sameTree(t, filepath.Join(dir, "data"), filepath.Join(dir, "out"))
				if sc.name == "reset" {
					// Connections reset mid-part: the S3 plugin retried, logged
					// each retry, and pipe counted them in its metrics.
					retries := s3Retries(t, filepath.Join(dir, "backup.prom")) + s3Retries(t, filepath.Join(dir, "restore.prom"))
					if retries == 0 {
						t.Errorf("connections were reset, yet pipe_retries_total{endpoint=\"s3\"} = 0 after the backup and the restore:\n%s", r.Stderr)
					}
					t.Logf("retries counted: %v", retries)
				}
			}
			s3WaitNoUploads(t, b, bucket)
		})
	}
}

// s3Retries reads pipe_retries_total{endpoint="s3"} from a metrics
// textfile.
func s3Retries(t *testing.T, path string) float64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the metrics textfile: %v", err)
	}
	m := regexp.MustCompile(`(?m)^pipe_retries_total\{[^}]*endpoint="s3"[^}]*\} (\S+)$`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		t.Fatalf("pipe_retries_total: %v", err)
	}
	return n
}

// keep_last = 2 over 3 runs leaves 2 runs in the bucket.
func TestS3Retention(t *testing.T) {
	b := newS3Bench(t)
	bucket := b.bucket(t, "retention")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "data/a"), randomBytes(1, 100_000))
	writeFile(t, filepath.Join(dir, "data/b/c"), randomBytes(2, 6*s3MiB))
	hcl := s3RoundTripFile("  compress {}\n  checksum {}\n")
	hcl = strings.Replace(hcl, "path_style        = true\n", "path_style        = true\n    keep_last         = 2\n", 1)
	writeFile(t, filepath.Join(dir, "p.hcl"), []byte(hcl))
	env := b.env(bucket, b.m.Endpoint)
	var last result
	for i := 0; i < 3; i++ {
		last = mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup")
	}
	if !strings.Contains(last.Stderr, "kept 2 runs, deleted 1 run") {
		t.Errorf("the summary does not report retention:\n%s", last.Stderr)
	}
	runs := map[string]int{}
	for _, k := range withoutIndex(t, b.keys(t, bucket, "rt/backup/"), "rt/backup/") {
		runs[strings.Split(k, "/")[2]]++
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs left, want 2: %v", len(runs), runs)
	}
	for run, n := range runs {
		if n != 3 {
			t.Errorf("run %s has %d objects, want 3 (two streams and the manifest)", run, n)
		}
	}
	mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "restore")
	sameTree(t, filepath.Join(dir, "data"), filepath.Join(dir, "out"))
}

// Credentials never appear in pipe's output, plans or manifests; wrong
// settings give errors that say what to fix.
func TestS3Secrets(t *testing.T) {
	b := newS3Bench(t)
	bucket := b.bucket(t, "secrets")
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "data/a"), randomBytes(1, 7*s3MiB))
	writeFile(t, filepath.Join(dir, "p.hcl"), []byte(s3RoundTripFile(s3FullStages)))
	mustPipe(t, dir, nil, "keygen", "-o", "keys/backup")
	env := b.env(bucket, b.m.Endpoint)
	secret := b.m.Pass
	check := func(what string, r result) {
		t.Helper()
		for _, out := range []string{r.Stdout, r.Stderr} {
			if strings.Contains(out, secret) {
				t.Errorf("%s shows the secret key:\n%s", what, out)
			}
		}
	}
	plan := mustPipe(t, dir, env, "plan", "p.hcl")
	check("plan", plan)
	t.Logf("pipe plan:\n%s", plan.Stdout)
	if !strings.Contains(plan.Stdout, "secret_access_key = (sensitive)") {
		t.Errorf("the plan does not show the secret as (sensitive):\n%s", plan.Stdout)
	}
	check("plan --json", mustPipe(t, dir, env, "plan", "p.hcl", "--json"))
	check("backup", mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup"))
	check("backup --json", mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup", "--json"))
	check("restore", mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "restore"))
	sameTree(t, filepath.Join(dir, "data"), filepath.Join(dir, "out"))
	keys := b.keys(t, bucket, "")
	if len(withoutIndex(t, keys, "rt/backup/")) != 4 {
		t.Errorf("objects: %v", keys)
	}
	for _, k := range keys {
		data, _ := b.get(bucket, k)
		if bytes.Contains(data, []byte(secret)) || bytes.Contains(data, []byte(b.m.User)) {
			t.Errorf("%s holds a credential", k)
		}
	}

	// Wrong settings: each error says what to fix, and never repeats a
	// credential.
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"PIPE_VAR_secret_key=wrong-secret-0123456789"}, "check secret_access_key"},
		{[]string{"PIPE_VAR_access_key=nobody-0123456789"}, "does not know this access key"},
		{[]string{"PIPE_VAR_bucket=no-such-bucket"}, `bucket "no-such-bucket" does not exist at ` + b.m.Endpoint + `: create it or fix bucket`},
		{[]string{"PIPE_VAR_endpoint=http://127.0.0.1:1", "PIPE_VAR_retries=1"}, "connection refused at http://127.0.0.1:1: check endpoint"},
	} {
		r := runPipe(t, dir, append(b.env(bucket, b.m.Endpoint), tc.env...), "run", "p.hcl", "--pipeline", "backup")
		if r.Err == nil {
			t.Errorf("%v: the backup did not fail", tc.env)
			continue
		}
		for _, line := range strings.Split(r.Stderr, "\n") {
			if strings.HasPrefix(line, "Error:") {
				t.Logf("%v: %s", tc.env, line)
			}
		}
		if !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: the error does not say %q:\n%s", tc.env, tc.want, r.Stderr)
		}
		for _, e := range append(tc.env, "PIPE_VAR_secret_key="+secret) {
			if v := strings.SplitN(e, "=", 2)[1]; strings.Contains(e, "_key=") && strings.Contains(r.Stderr, v) {
				t.Errorf("%v: the error shows a credential:\n%s", tc.env, r.Stderr)
			}
		}
	}
	if n := len(withoutIndex(t, b.keys(t, bucket, ""), "rt/backup/")); n != 4 {
		t.Errorf("failed runs left objects: %d", n)
	}
	b.noUploads(t, bucket)
}
