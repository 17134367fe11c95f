package s3

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/pipebackup/pipe/plugins/sdk"
)

func TestS3Schemas(t *testing.T) {
	if err := (SinkType{}).Schema().Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (SourceType{}).Schema().Validate(); err != nil {
		t.Fatal(err)
	}
	for _, s := range []sdk.Schema{SinkType{}.Schema(), SourceType{}.Schema()} {
		for _, name := range []string{"access_key_id", "secret_access_key", "session_token"} {
			if a, ok := s.Attribute(name); !ok || !a.Secret {
				t.Errorf("%s is not a secret attribute", name)
			}
		}
		for name, prof := range map[string]string{"part_size": "part_size", "concurrency": "concurrency"} {
			if a, _ := s.Attribute(name); a.Profile != prof {
				t.Errorf("%s takes no profile setting", name)
			}
		}
	}
	if k, ok := (SinkType{}).Schema().KeyAttribute(); !ok || k.Name != "key" {
		t.Error("the sink's key attribute is not key")
	}
}

func TestS3PlanPartSize(t *testing.T) {
	for _, tc := range []struct {
		configured, size, max, want int64
	}{
		{16 * mib, 100, -1, 16 * mib},
		{1 * mib, 100, -1, minPartSize},               // at least 5 MiB
		{16 * mib, -1, -1, 16 * mib},                  // nothing known: as configured
		{5 * mib, 10000 * 5 * mib, -1, 5 * mib},       // exactly 10,000 parts
		{5 * mib, 10000*5*mib + 1, -1, 6 * mib},       // one byte more: larger parts
		{16 * mib, -1, 1024 * gib, 105 * mib},         // the bound decides when the size is unknown
		{16 * mib, 1024 * gib, 4096 * gib, 105 * mib}, // the size beats the bound
		{64 * mib, 1024 * gib, -1, 105 * mib},         // 1 TiB / 10,000 = 104.9 MiB, rounded up to a MiB
		{8 * mib, 100 * gib, -1, 11 * mib},            // 100 GiB: 10.24 MiB → 11 MiB
		{16 * mib, 5 * 1024 * gib, -1, 525 * mib},     // 5 TiB
		{16 * mib, -1, 100 * 1024 * gib, maxPartSize}, // never above 5 GiB
		{6*gib + 1, 10, -1, maxPartSize},              // a configured size above S3's maximum is capped
	} {
		got := planPartSize(tc.configured, tc.size, tc.max)
		if got != tc.want {
			t.Errorf("planPartSize(%d, %d, %d) = %d (%s), want %d", tc.configured, tc.size, tc.max, got, sdk.FormatSize(got), tc.want)
		}
		n := tc.size
		if n < 0 {
			n = tc.max
		}
		if n > 0 && n <= maxObject && (n+got-1)/got > maxParts {
			t.Errorf("planPartSize(%d, %d, %d) = %d needs %d parts", tc.configured, tc.size, tc.max, got, (n+got-1)/got)
		}
	}
}

func TestS3SourceRoot(t *testing.T) {
	for _, tc := range []struct{ prefix, key, root, name string }{
		{"", "", "", ""},
		{"pg/nightly/", "", "pg/nightly/", ""},
		{"pg/nightly", "", "pg/nightly/", ""},
		{"/pg/nightly", "", "pg/nightly/", ""},
		{"", "pg/run1/pipe-manifest.json", "pg/run1/", "pipe-manifest.json"},
		{"", "db.dump", "", "db.dump"},
		{"pg/", "run1/pipe-manifest.json", "pg/", "run1/pipe-manifest.json"},
	} {
		root, name := sourceRoot(tc.prefix, tc.key)
		if root != tc.root || name != tc.name {
			t.Errorf("sourceRoot(%q, %q) = %q, %q; want %q, %q", tc.prefix, tc.key, root, name, tc.root, tc.name)
		}
	}
}

func TestS3ConfigureDiagnostics(t *testing.T) {
	for _, tc := range []struct {
		cfg  map[string]any
		attr string
	}{
		{map[string]any{"bucket": "", "key": "x"}, "bucket"},
		{map[string]any{"bucket": "a/b"}, "bucket"},
		{map[string]any{"bucket": "b", "endpoint": "minio:9000"}, "endpoint"},
		{map[string]any{"bucket": "b", "endpoint": "http://user:pw@minio:9000"}, "endpoint"},
		{map[string]any{"bucket": "b", "endpoint": "http://m:9000", "access_key_id": "AK"}, "secret_access_key"},
		{map[string]any{"bucket": "b", "endpoint": "http://m:9000", "secret_access_key": "SK"}, "access_key_id"},
		{map[string]any{"bucket": "b", "endpoint": "http://m:9000", "part_size": 1 * mib}, "part_size"},
		{map[string]any{"bucket": "b", "endpoint": "http://m:9000", "concurrency": int64(-1)}, "concurrency"},
		{map[string]any{"bucket": "b", "endpoint": "http://m:9000", "checksum": "md5"}, "checksum"},
		{map[string]any{"bucket": "b", "endpoint": "http://m:9000", "server_side_encryption": "yes"}, "server_side_encryption"},
		{map[string]any{"bucket": "b", "endpoint": "http://m:9000", "read_buffer_size": int64(10)}, "read_buffer_size"},
	} {
		_, d := SinkType{}.Configure(context.Background(), sdk.NewConfig(tc.cfg))
		if !d.HasErrors() || d[0].Attribute != tc.attr {
			t.Errorf("%v: diagnostics %+v, want an error about %s", tc.cfg, d, tc.attr)
		}
	}
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_DEFAULT_REGION", "")
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	if _, d := (SinkType{}).Configure(context.Background(), sdk.NewConfig(map[string]any{"bucket": "b"})); !d.HasErrors() || d[0].Attribute != "region" {
		t.Errorf("AWS without a region: %+v", d)
	}
	if _, d := (SourceType{}).Configure(context.Background(), sdk.NewConfig(map[string]any{"bucket": "b", "endpoint": "http://m:9000", "key": "dir/"})); !d.HasErrors() || d[0].Attribute != "key" {
		t.Errorf("a source key naming a folder: %+v", d)
	}
	if _, d := (SourceType{}).Configure(context.Background(), sdk.NewConfig(map[string]any{"bucket": "b", "endpoint": "http://m:9000", "part_size": mib})); d.HasErrors() {
		t.Errorf("a source with 1 MiB ranges: %v", d.Err())
	}
}

func TestS3Memory(t *testing.T) {
	cfg := sdk.NewConfig(map[string]any{"bucket": "b", "part_size": 16 * mib, "concurrency": int64(4), "read_buffer_size": 256 * kib, "write_buffer_size": 256 * kib})
	want := 2*4*(16*mib+512*kib) + 2*mib
	if got := (SinkType{}).Memory(cfg, 2); got != want {
		t.Errorf("sink memory %d, want %d", got, want)
	}
	if got := (SourceType{}).Memory(cfg, 2); got != want {
		t.Errorf("source memory %d, want %d", got, want)
	}
	// Without settings: the defaults.
	if got := (SinkType{}).Memory(sdk.NewConfig(nil), 1); got != 4*(64*mib+512*kib)+2*mib {
		t.Errorf("default memory %d", got)
	}
}

// SmallObjectMemory bounds what a writer of an object of declared size
// (a WAL archive's) holds before Commit, and is far below Memory for
// objects smaller than a part; a larger one is counted as Memory counts.
func TestS3SmallObjectMemory(t *testing.T) {
	f := newFake(t)
	extra := map[string]any{"part_size": 8 * mib, "concurrency": int64(4)}
	snk := newSink(t, f, extra)
	cfg := sdk.NewConfig(f.config(extra))
	for i, n := range []int{1, 300 * int(kib), int(8*mib) - 5, int(8 * mib)} {
		data := randBytes(uint64(i), n)
		w := written(t, snk, fmt.Sprintf("small-%d", n), data, true, 1<<20)
		held := int64(cap(w.(*objectWriter).buf))
		est := (SinkType{}).SmallObjectMemory(cfg, 1, int64(n)) - 2*mib - 2*defaultBufferSize
		if held == 0 || held > est {
			t.Errorf("%d bytes: the writer holds %d bytes, SmallObjectMemory counts %d for it", n, held, est)
		}
		if err := w.Commit(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if small, all := (SinkType{}).SmallObjectMemory(cfg, 8, 16*mib+64*kib), (SinkType{}).Memory(cfg, 8); small != all {
		t.Errorf("objects larger than a part: %d, Memory %d", small, all)
	}
	if small, all := (SourceType{}).SmallObjectMemory(cfg, 8, mib), (SourceType{}).Memory(cfg, 8); small != 8*(mib+2*defaultBufferSize)+2*mib || small >= all/4 {
		t.Errorf("source, 1 MiB objects: %d (Memory %d)", small, all)
	}
}

func apiErr(code string, status int, hdr http.Header) error {
	resp := &http.Response{StatusCode: status, Header: hdr}
	if resp.Header == nil {
		resp.Header = http.Header{}
	}
	return &smithy.OperationError{ServiceID: "S3", OperationName: "PutObject", Err: &awshttp.ResponseError{
		ResponseError: &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: resp},
			Err: &smithy.GenericAPIError{Code: code, Message: "the store says " + code}}}}
}

func TestS3Explain(t *testing.T) {
	st := &store{bucket: "backups", endpoint: "http://minio:9000", region: "us-east-1", cfg: connConfig{Timeout: 3 * time.Second}}
	for _, tc := range []struct {
		err      error
		want     []string
		notFound bool
	}{
		{apiErr("NoSuchBucket", 404, nil), []string{`uploading s3://backups/k: bucket "backups" does not exist at http://minio:9000: create it or fix bucket`}, false},
		{apiErr("NoSuchKey", 404, nil), []string{"no such object"}, true},
		{apiErr("NotFound", 404, nil), []string{"no such object"}, true},
		{apiErr("AccessDenied", 403, nil), []string{"access denied", "check access_key_id and secret_access_key"}, false},
		{apiErr("InvalidAccessKeyId", 403, nil), []string{"does not know this access key", "check access_key_id"}, false},
		{apiErr("SignatureDoesNotMatch", 403, nil), []string{"check secret_access_key"}, false},
		{apiErr("PermanentRedirect", 301, http.Header{"X-Amz-Bucket-Region": {"eu-west-1"}}), []string{`set region = "eu-west-1"`}, false},
		{apiErr("RequestTimeTooSkewed", 403, nil), []string{"clock"}, false},
		{apiErr("SlowDown", 503, nil), []string{"lower concurrency"}, false},
		{apiErr("XMinioStorageFull", 507, nil), []string{"the store is full"}, false},
		{&smithy.OperationError{Err: &smithy.GenericAPIError{Code: "AuthorizationHeaderMalformed", Message: "the region 'us-east-1' is wrong; expecting 'ap-south-1'"}}, []string{`set region = "ap-south-1"`}, false},
		{&smithy.GenericAPIError{Code: "InvalidRequest", Message: "Checksum algorithm CRC32C is not supported"}, []string{`set checksum = "sha256" or "none"`}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Name: "backups.minio", Err: "no such host"}}, []string{"cannot resolve backups.minio", "path_style = true"}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, []string{"connection refused at http://minio:9000: check endpoint"}, false},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, []string{"the connection to http://minio:9000 broke"}, false},
		{&net.OpError{Op: "read", Net: "tcp", Err: timeoutErr{}}, []string{"timeout (3s)"}, false},
		{errors.New("get identity: get credentials: failed to refresh cached credentials, no EC2 IMDS role found"), []string{"no credentials: set access_key_id"}, false},
		{fmt.Errorf("x: %w", context.Canceled), []string{"cancelled"}, false},
	} {
		err := st.fail("uploading", "k", tc.err)
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v → %q, want it to say %q", tc.err, err, w)
			}
		}
		if errors.Is(err, sdk.ErrNotFound) != tc.notFound {
			t.Errorf("%v: errors.Is(ErrNotFound) = %v", tc.err, !tc.notFound)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%v: the description does not wrap the error", tc.err)
		}
		if strings.Contains(err.Error(), "the store says") && !strings.Contains(err.Error(), "(") {
			t.Errorf("%v", err)
		}
	}
	if err := st.fail("listing", "", apiErr("NoSuchBucket", 404, nil)); !strings.HasPrefix(err.Error(), "listing bucket backups: ") {
		t.Errorf("%v", err)
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newSink(t *testing.T, f *fakeS3, extra map[string]any) *Sink {
	t.Helper()
	s, d := SinkType{}.Configure(context.Background(), sdk.NewConfig(f.config(extra)))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s.(*Sink)
}

func write(t *testing.T, w sdk.ObjectWriter, b []byte, chunk int) error {
	t.Helper()
	for len(b) > 0 {
		n := min(chunk, len(b))
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// written creates an object holding data (its size declared or not) and
// writes data in pieces of chunk bytes, without committing it.
func written(t *testing.T, snk *Sink, key string, data []byte, declared bool, chunk int) sdk.ObjectWriter {
	t.Helper()
	size := int64(-1)
	if declared {
		size = int64(len(data))
	}
	w, err := snk.Create(context.Background(), sdk.Object{Key: key, Size: size, MaxSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := write(t, w, data, chunk); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestS3UploadSizes(t *testing.T) {
	f := newFake(t)
	snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(3)})
	for i, n := range []int{0, 1, int(5*mib) - 1, int(5 * mib), int(5*mib) + 1, int(17*mib) + 3} {
		for _, declared := range []bool{true, false} {
			key := fmt.Sprintf("obj-%d-%v", n, declared)
			data := randBytes(uint64(i), n)
			w := written(t, snk, key, data, declared, 1<<20+7)
			if _, ok := f.object(key); ok {
				t.Fatalf("%s visible before Commit", key)
			}
			if err := w.Commit(context.Background()); err != nil {
				t.Fatal(err)
			}
			got, ok := f.object(key)
			if !ok || !bytes.Equal(got, data) {
				t.Fatalf("%s: stored %d bytes, want %d", key, len(got), n)
			}
			if err := w.Abort(context.Background()); err != nil {
				t.Fatalf("Abort after Commit: %v", err)
			}
			if _, ok := f.object(key); !ok {
				t.Fatal("Abort after Commit removed the object")
			}
			multipart := f.count("POST "+key+"?uploads") > 0
			if multipart != (int64(n) > 5*mib) {
				t.Errorf("%s: multipart %v for %d bytes", key, multipart, n)
			}
		}
	}
	if f.openUploads() != 0 {
		t.Errorf("%d multipart uploads left", f.openUploads())
	}
	// Read them back through the sink's Storage side.
	objs, err := snk.List(context.Background(), "obj-1")
	if err != nil || len(objs) != 4 {
		t.Fatalf("List: %v %v", objs, err)
	}
	rc, err := snk.Open(context.Background(), fmt.Sprintf("obj-%d-true", 17*mib+3))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, randBytes(5, int(17*mib)+3)) {
		t.Fatalf("read back %d bytes: %v", len(got), err)
	}
	if err := snk.Remove(context.Background(), "obj-0-true"); err != nil {
		t.Fatal(err)
	}
	if err := snk.Remove(context.Background(), "obj-0-true"); err != nil {
		t.Fatalf("removing a missing object: %v", err)
	}
	if _, err := snk.Open(context.Background(), "obj-0-true"); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("Open of a removed object: %v", err)
	}
}

// The first part of a stream of unknown size starts small and grows: by
// doubling, then into a whole part buffer. append's own 1.25× growth
// allocated ~5 parts' worth to fill one (fresh memory the kernel must zero,
// and a copy each time).
func TestS3FirstPartGrowth(t *testing.T) {
	f := newFake(t)
	snk := newSink(t, f, map[string]any{"part_size": 16 * mib})
	w, err := snk.Create(context.Background(), sdk.Object{Key: "growing", Size: -1, MaxSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	data := randBytes(3, int(16*mib)) // one part exactly: nothing goes up yet
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := write(t, w, data, 64<<10); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > uint64(2*16*mib) {
		t.Errorf("filling a 16 MiB first part allocated %d MiB", got>>20)
	}
	if err := w.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.object("growing"); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes, want %d", len(got), len(data))
	}
}

// An object of one part is summed while its bytes arrive, with every
// checksum algorithm, and the store (the fake checks the checksum header
// and the signed SHA-256 as S3 does) accepts what was sent; an object that
// turns out larger than a part goes up in parts as before.
func TestS3SinglePutSums(t *testing.T) {
	f := newFake(t)
	for _, algo := range []string{"crc32c", "crc32", "sha256", "none"} {
		snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(2), "checksum": algo})
		if !snk.st.signed {
			t.Fatal("the fake's plain-HTTP endpoint is not taken for one that signs payloads")
		}
		for i, n := range []int{0, 1, 3*int(mib) + 5, int(5 * mib), int(5*mib) + 1} {
			for _, declared := range []bool{true, false} {
				key := fmt.Sprintf("sums-%s-%d-%v", algo, n, declared)
				data := randBytes(uint64(100+i), n)
				w := written(t, snk, key, data, declared, 64<<10+3)
				ow := w.(*objectWriter)
				onePart := int64(n) <= 5*mib
				if onePart && (ow.sums == nil || ow.sums.n != n) {
					t.Fatalf("%s: the part was not summed as it filled", key)
				}
				if err := w.Commit(context.Background()); err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if got, ok := f.object(key); !ok || !bytes.Equal(got, data) {
					t.Fatalf("%s: stored %d bytes, want %d", key, len(got), n)
				}
				if multipart := f.count("POST "+key+"?uploads") > 0; multipart == onePart {
					t.Errorf("%s: multipart %v for %d bytes", key, multipart, n)
				}
				if onePart {
					f.mu.Lock()
					h := f.putHeaders[key]
					f.mu.Unlock()
					name := map[string]string{"crc32c": "X-Amz-Checksum-Crc32c", "crc32": "X-Amz-Checksum-Crc32", "sha256": "X-Amz-Checksum-Sha256"}[algo]
					if name != "" && h.Get(name) == "" {
						t.Errorf("%s: sent without %s", key, name)
					}
				}
			}
		}
	}
	// The SDK signs the hash it is given, not one of its own: a wrong one
	// is refused by the store.
	snk := newSink(t, f, nil)
	_, err := snk.st.client.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("b"), Key: aws.String("wrong-hash"),
		Body: bytes.NewReader([]byte("data")), ContentLength: aws.Int64(4)}, payloadHash(strings.Repeat("0", 64)))
	if err == nil {
		t.Error("a PutObject with a wrong precomputed payload hash was accepted: the SDK did not use it")
	}
}

// A sink whose parts do not go up holds at most concurrency parts, and
// Abort stops a Write that waits for one.
func TestS3UploadBackpressureAndAbort(t *testing.T) {
	f := newFake(t)
	release := make(chan struct{})
	var inFlight, most atomic.Int32
	f.onPart = func(w http.ResponseWriter, r *http.Request, num int) bool {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		return false
	}
	snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(2)})
	w, err := snk.Create(context.Background(), sdk.Object{Key: "slow", Size: -1, MaxSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int64
	done := make(chan error, 1)
	go func() {
		chunk := make([]byte, 256<<10)
		for {
			if _, err := w.Write(chunk); err != nil {
				done <- err
				return
			}
			accepted.Add(int64(len(chunk)))
		}
	}()
	time.Sleep(500 * time.Millisecond)
	if n := accepted.Load(); n > 2*5*mib+256*kib {
		t.Fatalf("accepted %d bytes with 2 parts of 5 MiB stuck", n)
	}
	start := time.Now()
	abortErr := make(chan error, 1)
	go func() { abortErr <- w.Abort(context.Background()) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Write went on after Abort")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a waiting Write did not return after Abort")
	}
	close(release)
	if err := <-abortErr; err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatal("Abort took too long")
	}
	if most.Load() > 2 {
		t.Errorf("%d parts in flight with concurrency 2", most.Load())
	}
	if f.openUploads() != 0 {
		t.Fatal("the multipart upload was not aborted")
	}
	if err := w.Commit(context.Background()); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	if _, ok := f.object("slow"); ok {
		t.Fatal("an aborted object exists")
	}
}

func TestS3UploadPartFails(t *testing.T) {
	f := newFake(t)
	f.onPart = func(w http.ResponseWriter, r *http.Request, num int) bool {
		if num == 2 {
			io.Copy(io.Discard, r.Body) // as S3 does: the answer, not a reset
			s3err(w, 403, "AccessDenied")
			return true
		}
		return false
	}
	snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(2)})
	w, _ := snk.Create(context.Background(), sdk.Object{Key: "fails", Size: 30 * mib, MaxSize: 30 * mib})
	err := write(t, w, make([]byte, 30*mib), 1<<20)
	if err == nil {
		err = w.Commit(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "uploading part 2 of s3://b/fails: access denied") {
		t.Fatalf("err = %v", err)
	}
	// The failed part aborted the upload; a Write after that still says
	// why (a writer fed through a pipe writes again after the failure).
	waitFor(t, func() bool { return f.openUploads() == 0 }, "the failed upload to be aborted")
	if _, werr := w.Write(make([]byte, 10)); werr == nil || !strings.Contains(werr.Error(), "uploading part 2 of s3://b/fails: access denied") {
		t.Fatalf("a write after the failure: %v", werr)
	}
	w.Abort(context.Background())
	if _, ok := f.object("fails"); ok {
		t.Fatal("a failed object exists")
	}
}

// A cancelled context aborts the upload even if nobody calls Abort.
func TestS3UploadCancelled(t *testing.T) {
	f := newFake(t)
	snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(2)})
	ctx, cancel := context.WithCancel(context.Background())
	w, _ := snk.Create(ctx, sdk.Object{Key: "cancelled", Size: -1, MaxSize: -1})
	if err := write(t, w, make([]byte, 12*mib), 1<<20); err != nil {
		t.Fatal(err)
	}
	if f.openUploads() != 1 {
		t.Fatalf("%d uploads open", f.openUploads())
	}
	cancel()
	waitFor(t, func() bool { return f.openUploads() == 0 }, "the cancelled upload to be aborted")
	if _, err := w.Write([]byte{1}); err == nil {
		t.Fatal("Write after cancellation succeeded")
	}
	if err := w.Commit(context.Background()); err == nil {
		t.Fatal("Commit after cancellation succeeded")
	}
	if _, ok := f.object("cancelled"); ok {
		t.Fatal("a cancelled object exists")
	}
}

// lose closes the connection of a request without an answer, as a network
// that loses the store's answer does.
func lose(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

// A CreateMultipartUpload whose answer is lost still started an upload;
// the SDK's retry starts another. The one pipe never learned the id of is
// aborted once the object is committed.
func TestS3CreateAnswerLost(t *testing.T) {
	f := newFake(t)
	lost := 0
	f.onCreate = func(w http.ResponseWriter, r *http.Request, start func() string) bool {
		if lost > 0 {
			return false
		}
		lost++
		start()
		lose(w)
		return true
	}
	snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(2)})
	data := randBytes(7, int(12*mib))
	w := written(t, snk, "lost", data, false, 1<<20)
	if err := w.Commit(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.object("lost"); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes, want %d", len(got), len(data))
	}
	if n := f.count("POST lost?uploads"); n != 2 {
		t.Fatalf("%d CreateMultipartUpload requests, want 2 (one answer lost)", n)
	}
	if n := f.openUploads(); n != 0 {
		t.Fatalf("%d multipart uploads left after the commit", n)
	}
}

// An exclusive object is put with If-None-Match: *: one at a key that
// holds an object fails with sdk.ErrExists and leaves that object; one
// whose answer was lost, retried by the SDK and refused because the first
// attempt had stored it, is recognised as this writer's by its metadata
// and commits.
func TestS3Exclusive(t *testing.T) {
	f := newFake(t)
	snk := newSink(t, f, nil)
	put := func(key string, b []byte) error {
		w, err := snk.Create(context.Background(), sdk.Object{Key: key, Size: int64(len(b)), MaxSize: int64(len(b)), Exclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := write(t, w, b, 1<<20); err != nil {
			t.Fatal(err)
		}
		return w.Commit(context.Background())
	}
	if err := put("claim", []byte("first")); err != nil {
		t.Fatal(err)
	}
	if err := put("claim", []byte("second")); !errors.Is(err, sdk.ErrExists) {
		t.Fatalf("a second exclusive put: %v, want sdk.ErrExists", err)
	}
	if got, _ := f.object("claim"); string(got) != "first" {
		t.Fatalf("the object holds %q after a refused put", got)
	}
	lost := 0
	f.onPut = func(w http.ResponseWriter, r *http.Request) bool {
		if lost > 0 {
			return false
		}
		lost++
		lose(w)
		return true
	}
	if err := put("lost", []byte("mine")); err != nil {
		t.Fatalf("an exclusive put whose answer was lost: %v", err)
	}
	if n := f.count("PUT lost"); n != 2 || lost != 1 {
		t.Fatalf("%d PutObject requests (%d answers lost), want 2 and 1", n, lost)
	}
}

// A start that is never answered fails the object; every upload the
// attempts started is aborted, including one whose request reaches the
// store after the attempt gave up.
func TestS3CreateNeverAnswered(t *testing.T) {
	f := newFake(t)
	var late sync.WaitGroup
	f.onCreate = func(w http.ResponseWriter, r *http.Request, start func() string) bool {
		lose(w)
		late.Add(1)
		go func() {
			defer late.Done()
			time.Sleep(300 * time.Millisecond) // held up in the network
			start()
		}()
		return true
	}
	snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(2)})
	w, _ := snk.Create(context.Background(), sdk.Object{Key: "never", Size: -1, MaxSize: -1})
	err := write(t, w, make([]byte, 12*mib), 1<<20)
	if err == nil {
		err = w.Commit(context.Background())
	}
	if err == nil || !strings.Contains(err.Error(), "starting the upload of s3://b/never") {
		t.Fatalf("err = %v", err)
	}
	if err := w.Abort(context.Background()); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	late.Wait()
	if n := f.count("POST never?uploads"); n != 3 {
		t.Fatalf("%d CreateMultipartUpload requests, want 3 (retries = 2)", n)
	}
	if n := f.openUploads(); n != 0 {
		t.Fatalf("%d multipart uploads left after the abort", n)
	}
	if f.listings() == 0 {
		t.Fatal("no listing of multipart uploads")
	}
}

// A start the store refuses started nothing: no listing is made.
func TestS3CreateRefused(t *testing.T) {
	f := newFake(t)
	f.onCreate = func(w http.ResponseWriter, r *http.Request, start func() string) bool {
		s3err(w, 403, "AccessDenied")
		return true
	}
	snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(2)})
	w, _ := snk.Create(context.Background(), sdk.Object{Key: "refused", Size: -1, MaxSize: -1})
	if err := write(t, w, make([]byte, 12*mib), 1<<20); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("err = %v", err)
	}
	if err := w.Abort(context.Background()); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if n := f.listings(); n != 0 {
		t.Fatalf("%d listings of multipart uploads after a refusal", n)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for start := time.Now(); time.Since(start) < 10*time.Second; time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

func newSource(t *testing.T, f *fakeS3, extra map[string]any) sdk.Source {
	t.Helper()
	s, d := SourceType{}.Configure(context.Background(), sdk.NewConfig(f.config(extra)))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s
}

// A range whose body breaks off is asked again for its missing bytes only.
func TestS3RangeResume(t *testing.T) {
	f := newFake(t)
	data := randBytes(9, int(3*mib)+5)
	f.objects["dir/obj"] = data
	var mu sync.Mutex
	broken := map[string]bool{}
	f.onGet = func(w http.ResponseWriter, r *http.Request, rng string, body []byte) bool {
		mu.Lock()
		first := !broken[rng]
		broken[rng] = true
		mu.Unlock()
		if first && len(body) > 100<<10 {
			cut(w, rng, body, len(data), 100<<10)
			return true
		}
		return false
	}
	src := newSource(t, f, map[string]any{"prefix": "dir/", "part_size": mib, "concurrency": int64(2)})
	infos, err := src.Streams(context.Background())
	if err != nil || len(infos) != 1 || infos[0].Name != "obj" || infos[0].Size != int64(len(data)) {
		t.Fatalf("Streams = %+v, %v", infos, err)
	}
	rc, err := src.Open(context.Background(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	for i := int64(0); i < 4; i++ {
		off := i * mib
		end := min(off+mib, int64(len(data))) - 1
		if end-off+1 <= 100<<10 {
			continue
		}
		want := fmt.Sprintf("GET dir/obj?x-id=GetObject bytes=%d-%d", off+100<<10, end)
		if f.count(want) != 1 {
			t.Errorf("no resumed request %q in %q", want, f.requests)
		}
	}
}

// A range that breaks off every time fails after retries, saying so.
func TestS3RangeGivesUp(t *testing.T) {
	f := newFake(t)
	f.objects["obj"] = randBytes(1, int(2*mib))
	f.onGet = func(w http.ResponseWriter, r *http.Request, rng string, body []byte) bool {
		if strings.HasPrefix(rng, "bytes=0-") {
			return false
		}
		cut(w, rng, body, int(2*mib), 10)
		return true
	}
	src := newSource(t, f, map[string]any{"part_size": mib, "retries": int64(2)})
	rc, err := src.Open(context.Background(), "obj")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	_, err = io.ReadAll(rc)
	if err == nil || !strings.Contains(err.Error(), "of s3://b/obj") || !strings.Contains(err.Error(), "broke") {
		t.Fatalf("err = %v", err)
	}
}

func TestS3Open(t *testing.T) {
	f := newFake(t)
	f.objects["p/empty"] = []byte{}
	f.objects["p/sub/one"] = []byte{1}
	f.objects["p/folder/"] = []byte{}
	src := newSource(t, f, map[string]any{"prefix": "p"})
	infos, err := src.Streams(context.Background())
	if err != nil || fmt.Sprint(infos) != "[{empty 0} {sub/one 1}]" {
		t.Fatalf("Streams = %v, %v", infos, err)
	}
	for name, want := range map[string][]byte{"empty": {}, "sub/one": {1}} {
		rc, err := src.Open(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: %v %v", name, got, err)
		}
	}
	if _, err := src.Open(context.Background(), "missing"); !errors.Is(err, sdk.ErrNotFound) || !strings.Contains(err.Error(), "s3://b/p/missing") {
		t.Fatalf("missing: %v", err)
	}
	if _, err := src.Open(context.Background(), "../secret"); err == nil {
		t.Fatal("opened an object outside the prefix")
	}
	one := newSource(t, f, map[string]any{"key": "p/sub/one"})
	if infos, err := one.Streams(context.Background()); err != nil || fmt.Sprint(infos) != "[{one 1}]" {
		t.Fatalf("one object: %v %v", infos, err)
	}
	if _, err := newSource(t, f, map[string]any{"prefix": "nothing/"}).Streams(context.Background()); err == nil || !strings.Contains(err.Error(), "nothing in s3://b/nothing/") {
		t.Fatalf("empty prefix: %v", err)
	}
	if _, err := newSource(t, f, map[string]any{"bucket": "other"}).Streams(context.Background()); err == nil || !strings.Contains(err.Error(), "create it or fix bucket") {
		t.Fatalf("missing bucket: %v", err)
	}
}

// Cancelling the context of an open object ends its reads at once.
func TestS3ReadCancelled(t *testing.T) {
	f := newFake(t)
	f.objects["big"] = make([]byte, 8*mib)
	stall := make(chan struct{})
	defer close(stall)
	f.onGet = func(w http.ResponseWriter, r *http.Request, rng string, body []byte) bool {
		if strings.HasPrefix(rng, "bytes=0-") {
			return false
		}
		select {
		case <-stall:
		case <-r.Context().Done():
		}
		return true
	}
	src := newSource(t, f, map[string]any{"part_size": mib, "concurrency": int64(3)})
	ctx, cancel := context.WithCancel(context.Background())
	rc, err := src.Open(ctx, "big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(rc, make([]byte, mib)); err != nil {
		t.Fatal(err)
	}
	cancel()
	start := time.Now()
	if _, err := rc.Read(make([]byte, 10)); err == nil {
		t.Fatal("read after cancellation")
	}
	rc.Close()
	if time.Since(start) > 2*time.Second {
		t.Fatalf("cancellation took %s", time.Since(start))
	}
}

// closable is a file that cannot be read once closed.
type closable struct {
	r      io.ReaderAt
	closed atomic.Bool
}

func (c *closable) ReadAt(p []byte, off int64) (int, error) {
	if c.closed.Load() {
		return 0, os.ErrClosed
	}
	return c.r.ReadAt(p, off)
}

// failingAt reads like r up to byte at, then fails as a file that cannot
// be read does.
type failingAt struct {
	r  io.ReaderAt
	at int64
}

func (f failingAt) ReadAt(p []byte, off int64) (int, error) {
	if off+int64(len(p)) > f.at {
		return 0, &sdk.ReadError{Err: errors.New("input/output error")}
	}
	return f.r.ReadAt(p, off)
}

// An object taken from a file at once (ReadAtFrom) goes up without part
// buffers: one part in one PutObject at Commit, more as parts read from
// their places in the file, with the checksums the store verifies (the
// fake checks them); nothing is visible before Commit.
func TestS3ReadAtFrom(t *testing.T) {
	f := newFake(t)
	ctx := context.Background()
	for _, algo := range []string{"crc32c", "none"} {
		snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(3), "checksum": algo})
		for i, n := range []int{0, 1, int(5 * mib), int(5*mib) + 1, int(17*mib) + 3} {
			key := fmt.Sprintf("file-%s-%d", algo, n)
			data := randBytes(uint64(40+i), n)
			w, err := snk.Create(ctx, sdk.Object{Key: key, Size: int64(n), MaxSize: -1})
			if err != nil {
				t.Fatal(err)
			}
			var progress atomic.Int64
			file := &closable{r: bytes.NewReader(data)}
			sent, err := w.(sdk.ReaderAtFrom).ReadAtFrom(file, int64(n), func(k int64) { progress.Add(k) })
			file.closed.Store(true) // the file may be closed once ReadAtFrom returned
			if err != nil || sent != int64(n) || progress.Load() != int64(n) {
				t.Fatalf("%s: sent %d, progress %d: %v", key, sent, progress.Load(), err)
			}
			if ow := w.(*objectWriter); int64(n) > 5*mib && ow.bufs != 0 {
				t.Errorf("%s: %d part buffers taken by a multipart upload", key, ow.bufs)
			}
			if _, ok := f.object(key); ok {
				t.Fatalf("%s visible before Commit", key)
			}
			if err := w.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if got, ok := f.object(key); !ok || !bytes.Equal(got, data) {
				t.Fatalf("%s: stored %d bytes, want %d", key, len(got), n)
			}
			if multipart := f.count("POST "+key+"?uploads") > 0; multipart != (int64(n) > 5*mib) {
				t.Errorf("%s: multipart %v for %d bytes", key, multipart, n)
			}
		}
	}

	snk := newSink(t, f, map[string]any{"part_size": 5 * mib, "concurrency": int64(2)})
	data := randBytes(50, int(12*mib))
	// Not after a Write.
	w := written(t, snk, "written", data[:10], true, 10)
	if _, err := w.(sdk.ReaderAtFrom).ReadAtFrom(bytes.NewReader(data), int64(len(data)), nil); err == nil {
		t.Error("ReadAtFrom after a Write succeeded")
	}
	w.Abort(ctx)
	// A file that fails to read fails the object with the file's error,
	// and its abort leaves no upload behind.
	w, _ = snk.Create(ctx, sdk.Object{Key: "unreadable", Size: int64(len(data)), MaxSize: -1})
	_, err := w.(sdk.ReaderAtFrom).ReadAtFrom(failingAt{bytes.NewReader(data), 7 * mib}, int64(len(data)), nil)
	var re *sdk.ReadError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v, want the file's read error", err)
	}
	if err := w.Commit(ctx); err == nil {
		t.Fatal("Commit after a failed ReadAtFrom succeeded")
	}
	if _, ok := f.object("unreadable"); ok || f.openUploads() != 0 {
		t.Fatalf("left behind: object %v, %d uploads", ok, f.openUploads())
	}
	// A file that ends before its size (it shrank) is the file's failure
	// too, for one part and for several.
	for _, size := range []int64{3 * mib, 12 * mib} {
		w, _ = snk.Create(ctx, sdk.Object{Key: "shrank", Size: size, MaxSize: -1})
		_, err = w.(sdk.ReaderAtFrom).ReadAtFrom(bytes.NewReader(data[:size-mib]), size, nil)
		if !errors.As(err, &re) || !strings.Contains(err.Error(), "it shrank while it was read") {
			t.Fatalf("%d bytes: err = %v, want the file's read error", size, err)
		}
		w.Abort(ctx)
	}
	if f.openUploads() != 0 {
		t.Fatalf("%d uploads left", f.openUploads())
	}
}

// An HTTPS endpoint is trusted through AWS_CA_BUNDLE, as the SDK's own
// transport would trust it: the sink's transport takes the bundle's roots.
func TestS3TrustsCABundle(t *testing.T) {
	f := unstartedFake(t)
	f.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	f.srv.StartTLS()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})
	if err := os.WriteFile(bundle, cert, 0o600); err != nil {
		t.Fatal(err)
	}
	// Only the bundle under test: no shared config's ca_bundle.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	data := randBytes(21, 1000)
	upload := func() error {
		w := written(t, newSink(t, f, map[string]any{"retries": int64(0)}), "trusted", data, true, 100)
		return w.Commit(context.Background())
	}
	// Without the bundle the test server's certificate is unknown.
	t.Setenv("AWS_CA_BUNDLE", "")
	if err := upload(); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA bundle: %v", err)
	}
	t.Setenv("AWS_CA_BUNDLE", bundle)
	if err := upload(); err != nil {
		t.Fatalf("with the CA bundle: %v", err)
	}
	if got, _ := f.object("trusted"); !bytes.Equal(got, data) {
		t.Error("the object did not land")
	}
}

// Only a plain-HTTP endpoint skips the CA bundle: any other scheme, or an
// endpoint that is not a URL, keeps it.
func TestS3PlainHTTP(t *testing.T) {
	for endpoint, want := range map[string]bool{
		"http://127.0.0.1:9000":     true,
		"HTTP://localhost:9000":     true,
		"https://127.0.0.1:9000":    false,
		"https://s3.amazonaws.com":  false,
		"":                          false,
		"localhost:9000":            false,
		"http://":                   false,
		"http://[::1]:9000/minio/x": true,
	} {
		if got := plainHTTP(endpoint); got != want {
			t.Errorf("plainHTTP(%q) = %v, want %v", endpoint, got, want)
		}
	}
}
