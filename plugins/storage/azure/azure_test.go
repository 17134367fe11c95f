package azure

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

var ctx = context.Background()

func init() {
	// Range retries in these tests should not wait seconds.
	retryDelay, maxRetryDelay = 10*time.Millisecond, 50*time.Millisecond
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newTestSink(t *testing.T, f *fakeBlobs, extra map[string]any) *Sink {
	t.Helper()
	s, d := SinkType{}.Configure(ctx, sdk.NewConfig(f.config(extra)))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s.(*Sink)
}

func newTestSource(t *testing.T, f *fakeBlobs, extra map[string]any) *Source {
	t.Helper()
	s, d := SourceType{}.Configure(ctx, sdk.NewConfig(f.config(extra)))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return s.(*Source)
}

func writeAll(t *testing.T, w sdk.ObjectWriter, b []byte, piece int) {
	t.Helper()
	for len(b) > 0 {
		n := min(piece, len(b))
		if _, err := w.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
}

func TestAzureSchemas(t *testing.T) {
	for name, s := range map[string]sdk.Schema{"source": SourceType{}.Schema(), "sink": SinkType{}.Schema()} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for _, a := range []string{"account_key", "sas_token", "connection_string"} {
			if attr, ok := s.Attribute(a); !ok || !attr.Secret {
				t.Errorf("%s: %s is not a secret attribute", name, a)
			}
		}
		if a, _ := s.Attribute("block_size"); a.Profile != "part_size" || a.Type != sdk.Size {
			t.Errorf("%s: block_size %+v", name, a)
		}
		if a, _ := s.Attribute("concurrency"); a.Profile != "concurrency" || a.Type != sdk.Number {
			t.Errorf("%s: concurrency %+v", name, a)
		}
		if a, _ := s.Attribute("bucket"); !a.Required || !strings.Contains(a.Description, "container") {
			t.Errorf("%s: bucket %+v", name, a)
		}
	}
	if k, ok := (SinkType{}).Schema().KeyAttribute(); !ok || k.Name != "key" {
		t.Error("the sink's key attribute")
	}
	if _, ok := (SourceType{}).Schema().KeyAttribute(); ok {
		t.Error("a source declares no key attribute")
	}
	if !(SinkType{}).Schema().Storage {
		t.Error("the sink keeps objects: Storage")
	}
}

func TestAzureConfigDiagnostics(t *testing.T) {
	const key = "c2VjcmV0LWtleS1zZWNyZXQta2V5LXNlY3JldC1rZXk="
	base := map[string]any{"bucket": "backups", "account_url": "https://acct.blob.core.windows.net/", "account_key": key}
	with := func(kv ...any) map[string]any {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == nil {
				delete(m, kv[i].(string))
			} else {
				m[kv[i].(string)] = kv[i+1]
			}
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		values map[string]any
		attr   string
		want   string
	}{
		{"upper-case bucket", with("bucket", "Backups"), "bucket", "lowercase letters"},
		{"short bucket", with("bucket", "ab"), "bucket", "3 to 63"},
		{"double hyphen", with("bucket", "a--b"), "bucket", "single hyphens"},
		{"no credentials", with("account_key", nil), "", "no default Azure credential chain"},
		{"two credentials", with("sas_token", "sv=1&sig=abc"), "", "only one"},
		{"key not base64", with("account_key", "not base64 at all!"), "account_key", "Access keys"},
		{"sas without sig", with("account_key", nil, "sas_token", "sv=2021&sp=r"), "sas_token", "signature"},
		{"url with query", with("account_url", "https://acct.blob.core.windows.net/?sv=1&sig=zzz"), "account_url", "sas_token"},
		{"url scheme", with("account_url", "ftp://acct"), "account_url", "https://"},
		{"no endpoint", with("account_url", nil), "account_url", "account_name"},
		{"no account name", with("account_url", "http://127.0.0.1:10000/"), "account_name", "account_name"},
		{"block too small", with("block_size", int64(1000)), "block_size", "64KiB to 4000MiB"},
		{"concurrency 0", with("concurrency", int64(0)), "concurrency", "1 to"},
		{"timeout", with("timeout", time.Millisecond), "timeout", "at least a second"},
		{"connection string and url", with("account_key", nil, "connection_string", "AccountName=a;AccountKey="+key), "account_url", "drop account_url"},
		{"bad connection string", with("account_key", nil, "account_url", nil, "connection_string", "garbage;"+key), "connection_string", "Key=Value"},
		{"single put too large", with("max_single_put_size", int64(6000*mib)), "max_single_put_size", "5000MiB"},
		{"tier", with("access_tier", "Lukewarm"), "access_tier", "Hot, Cool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, d := SinkType{}.Configure(ctx, sdk.NewConfig(tc.values))
			if !d.HasErrors() {
				t.Fatal("no error")
			}
			found := false
			for _, x := range d {
				text := x.Summary + " " + x.Detail
				if strings.Contains(text, key) || strings.Contains(text, "zzz") || strings.Contains(text, "garbage") {
					t.Fatalf("a diagnostic repeats a secret: %s", text)
				}
				if x.Attribute == tc.attr && strings.Contains(text, tc.want) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want %q at %q, got %+v", tc.want, tc.attr, d)
			}
		})
	}
	// The source has the same rules, and its own.
	_, d := SourceType{}.Configure(ctx, sdk.NewConfig(with("prefix", "/abs/")))
	if !d.HasErrors() || d[0].Attribute != "prefix" {
		t.Fatalf("%+v", d)
	}
}

func TestAzureAccountName(t *testing.T) {
	for u, want := range map[string]string{
		"https://acct.blob.core.windows.net/":          "acct",
		"https://acct.blob.core.chinacloudapi.cn":      "acct",
		"http://127.0.0.1:10000/devstoreaccount1":      "devstoreaccount1",
		"http://localhost:10000/devstoreaccount1/":     "devstoreaccount1",
		"http://azurite:10000/devstoreaccount1":        "devstoreaccount1",
		"https://acct-secondary.blob.core.windows.net": "acct-secondary",
	} {
		c := common{AccountURL: u}
		if got := c.accountName(); got != want {
			t.Errorf("%s: %q, want %q", u, got, want)
		}
	}
	c := common{AccountName: "given"}
	if c.serviceURL() != "https://given.blob.core.windows.net" {
		t.Error(c.serviceURL())
	}
}

func TestAzureMemory(t *testing.T) {
	cfg := func(vals map[string]any) sdk.Config { return sdk.NewConfig(vals) }
	// balanced: 16 MiB × 4 per stream, 2 streams.
	if got := (SinkType{}).Memory(cfg(map[string]any{"block_size": int64(16 * mib), "concurrency": int64(4)}), 2); got != 2*4*16*mib {
		t.Errorf("sink: %d", got)
	}
	// An object held for a single put needs its size in blocks.
	if got := (SinkType{}).Memory(cfg(map[string]any{"block_size": int64(4 * mib), "concurrency": int64(2), "max_single_put_size": int64(32 * mib)}), 1); got != 8*4*mib {
		t.Errorf("sink with a large single put: %d", got)
	}
	if got := (SourceType{}).Memory(cfg(map[string]any{"block_size": int64(8 * mib), "concurrency": int64(3)}), 2); got != 2*3*8*mib {
		t.Errorf("source: %d", got)
	}
	// Defaults when the host passes nothing.
	if got := (SinkType{}).Memory(cfg(nil), 1); got != defaultConcurrency*defaultBlockSize {
		t.Errorf("defaults: %d", got)
	}
}

// Blobs of at most a WAL segment take the blocks they fill; larger ones
// as many as Memory counts.
func TestAzureSmallObjectMemory(t *testing.T) {
	cfg := sdk.NewConfig(map[string]any{"block_size": int64(4 * mib), "concurrency": int64(8), "max_single_put_size": int64(256 * mib)})
	if got := (SinkType{}).SmallObjectMemory(cfg, 8, 16*mib+64*kib); got != 8*5*4*mib {
		t.Errorf("sink, 16 MiB blobs in 4 MiB blocks: %d", got)
	}
	if got := (SinkType{}).SmallObjectMemory(cfg, 8, mib); got != 8*4*mib {
		t.Errorf("sink, 1 MiB blobs: %d", got)
	}
	if got, want := (SinkType{}).SmallObjectMemory(cfg, 2, 100<<30), (SinkType{}).Memory(cfg, 2); got != want {
		t.Errorf("sink, large blobs: %d, Memory %d", got, want)
	}
	if got := (SourceType{}).SmallObjectMemory(cfg, 8, mib); got != 8*mib {
		t.Errorf("source, 1 MiB blobs: %d", got)
	}
	if got, want := (SourceType{}).SmallObjectMemory(cfg, 2, 1<<40), (SourceType{}).Memory(cfg, 2); got != want {
		t.Errorf("source, large blobs: %d, Memory %d", got, want)
	}
}

func TestAzureBlockSizeFor(t *testing.T) {
	for _, tc := range []struct{ bs, size, maxSize, want int64 }{
		{16 * mib, -1, -1, 16 * mib},
		{16 * mib, 100 * mib, -1, 16 * mib},
		{4 * mib, 50_000 * 4 * mib, -1, 4 * mib},
		{4 * mib, 50_000*4*mib + 1, -1, 5 * mib},
		{4 * mib, -1, 1 << 40, 21 * mib},
		{4 * mib, 1 << 50, -1, maxBlockSize},
	} {
		if got := blockSizeFor(tc.bs, tc.size, tc.maxSize); got != tc.want {
			t.Errorf("%+v: %d", tc, got)
		}
	}
}

func TestAzureBlockIDs(t *testing.T) {
	seen := map[string]bool{}
	for _, i := range []int{0, 1, 9999, 49_999} {
		id := blockID("0123456789abcdef", i)
		if len(id) != len(blockID("0123456789abcdef", 0)) || seen[id] {
			t.Fatalf("block id %d: %q", i, id)
		}
		seen[id] = true
	}
}

func TestAzureBuffersPerObject(t *testing.T) {
	for _, tc := range []struct {
		bs         int64
		conc       int
		single     int64
		wantBuffer int
	}{
		{16 * mib, 4, 16 * mib, 4},
		{16 * mib, 1, 16 * mib, 1},
		{1 * mib, 2, 16 * mib, 16},
		{1 * mib, 2, 0, 2},
		{1 * mib, 2, 1*mib + 1, 2},
	} {
		if got := buffersPerObject(tc.bs, tc.conc, tc.single); got != tc.wantBuffer {
			t.Errorf("%+v: %d", tc, got)
		}
	}
}

func TestAzureRedact(t *testing.T) {
	err := &url.Error{Op: "Put", URL: "https://acct.blob.core.windows.net/c/b?comp=block&sv=2021&sig=SECRETSIG%3D", Err: errors.New("dial tcp: connection refused")}
	msg := explain("staging block 1 of", "https://acct.blob.core.windows.net/c/b", err).Error()
	if strings.Contains(msg, "SECRETSIG") || !strings.Contains(msg, "connection refused") {
		t.Fatal(msg)
	}
	for in, bad := range map[string]string{
		`Put "http://h/c/b?sv=1&sig=abc123": EOF`:         "abc123",
		"AccountKey=S3CRET==;BlobEndpoint=x":              "S3CRET",
		"SharedAccessSignature=sv=1&sig=XYZ;AccountName=": "XYZ",
	} {
		if out := redact(in); strings.Contains(out, bad) {
			t.Errorf("redact(%q) = %q", in, out)
		}
	}
	if !errors.Is(explain("x", "y", context.Canceled), context.Canceled) {
		t.Error("explain hides context.Canceled")
	}
}

func TestAzureSegments(t *testing.T) {
	parts := [][]byte{[]byte("hello "), {}, []byte("blob "), []byte("world")}
	s := newSegments(parts)
	b, _ := io.ReadAll(s)
	if string(b) != "hello blob world" {
		t.Fatalf("%q", b)
	}
	s.Seek(3, io.SeekStart)
	buf := make([]byte, 5)
	n, _ := io.ReadFull(s, buf)
	if string(buf[:n]) != "lo bl" {
		t.Fatalf("%q", buf[:n])
	}
	if end, _ := s.Seek(0, io.SeekEnd); end != 16 {
		t.Fatal(end)
	}
	if _, err := s.Read(buf); err != io.EOF {
		t.Fatal(err)
	}
	body := newBody([]byte("abc"))
	body.Close()
	if _, err := body.Read(buf); err == nil {
		t.Fatal("a closed body still reads its buffer")
	}
}

func TestAzureAppendBounded(t *testing.T) {
	var b []byte
	for i := 0; i < 100; i++ {
		b = appendBounded(b, make([]byte, 1000), 64*kib)
		if cap(b) > 64*kib && len(b) <= 64*kib {
			t.Fatalf("capacity %d beyond the limit", cap(b))
		}
		if len(b) >= 60*kib {
			break
		}
	}
}

// A small object goes up in one Put Blob at Commit, and not before.
func TestAzureSinkSinglePut(t *testing.T) {
	f := newFake(t)
	s := newTestSink(t, f, map[string]any{"max_single_put_size": int64(256 * kib)})
	data := randomBytes(1, 200*kib) // 4 blocks of 64 KiB, held
	w, err := s.Create(ctx, sdk.Object{Key: "run/a.zst", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, w, data, 7000)
	if _, ok := f.get("run/a.zst"); ok || f.count("block") > 0 || f.count("PUT ") > 0 {
		t.Fatal("something was sent before Commit")
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.get("run/a.zst"); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes", len(got))
	}
	if f.count("block") != 0 || f.count("PUT  backups/run/a.zst") != 1 {
		t.Fatalf("requests %v", f.requests)
	}
	// Empty objects too.
	w, _ = s.Create(ctx, sdk.Object{Key: "run/empty", Size: 0})
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok := f.get("run/empty"); !ok || len(got) != 0 {
		t.Fatal("empty object")
	}
}

// A large object is staged in blocks as it arrives, never more than
// concurrency at once, with their MD5, and committed in order.
func TestAzureSinkBlocks(t *testing.T) {
	f := newFake(t)
	var stalls atomic.Int32
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "block" {
			time.Sleep(20 * time.Millisecond) // let blocks overlap
			stalls.Add(1)
		}
		return false
	})
	s := newTestSink(t, f, map[string]any{"max_single_put_size": int64(100 * kib), "concurrency": int64(3)})
	data := randomBytes(2, 20*64*kib+123)
	w, err := s.Create(ctx, sdk.Object{Key: "run/big", Size: int64(len(data))})
	if err != nil {
		t.Fatal(err)
	}
	writeAll(t, w, data, 50_000)
	if _, ok := f.get("run/big"); ok {
		t.Fatal("visible before Commit")
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.get("run/big"); !bytes.Equal(got, data) {
		t.Fatalf("stored %d bytes, want %d", len(got), len(data))
	}
	if n := f.count("block"); n != 21 {
		t.Fatalf("%d blocks staged, want 21", n)
	}
	if m := f.maxFlight["block"]; m > 3 || m < 2 {
		t.Fatalf("%d blocks in flight at most, want 2-3 (concurrency 3)", m)
	}
}

// While every buffer is in flight, Write waits: the sink holds the writer
// back instead of buffering the stream.
func TestAzureSinkBackpressure(t *testing.T) {
	f := newFake(t)
	release := make(chan struct{})
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "block" {
			<-release
		}
		return false
	})
	s := newTestSink(t, f, map[string]any{"max_single_put_size": int64(0), "concurrency": int64(2)})
	w, _ := s.Create(ctx, sdk.Object{Key: "slow", Size: -1})
	var accepted atomic.Int64
	done := make(chan error, 1)
	go func() {
		chunk := make([]byte, 16*kib)
		for i := 0; i < 64; i++ {
			if _, err := w.Write(chunk); err != nil {
				done <- err
				return
			}
			accepted.Add(int64(len(chunk)))
		}
		done <- nil
	}()
	time.Sleep(300 * time.Millisecond)
	if n := accepted.Load(); n > 2*64*kib+16*kib {
		t.Fatalf("accepted %d bytes with 2 blocks of 64 KiB stuck", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A block that fails with 500 is retried by azcore; one that is refused
// fails the object, names the block and blob, and nothing is committed.
func TestAzureSinkBlockFailures(t *testing.T) {
	f := newFake(t)
	var fails atomic.Int32
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "block" && fails.Add(1) <= 2 {
			io.Copy(io.Discard, r.Body)
			storageError(w, 500, "InternalError")
			return true
		}
		return false
	})
	s := newTestSink(t, f, map[string]any{"max_single_put_size": int64(0)})
	data := randomBytes(3, 5*64*kib)
	w, _ := s.Create(ctx, sdk.Object{Key: "retried", Size: -1})
	writeAll(t, w, data, 64*kib)
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := f.get("retried"); !bytes.Equal(got, data) {
		t.Fatal("retried object differs")
	}

	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "block" && strings.Contains(r.URL.Path, "refused") {
			io.Copy(io.Discard, r.Body)
			storageError(w, 403, "AuthorizationPermissionMismatch")
			return true
		}
		return false
	})
	w, _ = s.Create(ctx, sdk.Object{Key: "refused", Size: -1})
	var werr error
	for i := 0; i < 20 && werr == nil; i++ {
		_, werr = w.Write(make([]byte, 64*kib))
		time.Sleep(5 * time.Millisecond)
	}
	cerr := w.Commit(ctx)
	if cerr == nil {
		t.Fatal("committed an object whose blocks were refused")
	}
	for _, err := range []error{werr, cerr} {
		if err != nil && (!strings.Contains(err.Error(), "staging block") || !strings.Contains(err.Error(), "/backups/refused") ||
			!strings.Contains(err.Error(), "AuthorizationPermissionMismatch") || !strings.Contains(err.Error(), "Storage Blob Data Contributor")) {
			t.Fatalf("error %q", err)
		}
	}
	if _, ok := f.get("refused"); ok || f.count("PUT blocklist backups/refused") != 0 {
		t.Fatal("a refused object was committed")
	}
}

// Abort while a Write waits for a stuck block: the Write returns, nothing
// is committed, and Commit afterwards refuses.
func TestAzureSinkAbortUnblocks(t *testing.T) {
	f := newFake(t)
	stuck := make(chan struct{})
	defer close(stuck)
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "block" {
			select {
			case <-stuck:
			case <-r.Context().Done():
			}
			return true
		}
		return false
	})
	s := newTestSink(t, f, map[string]any{"max_single_put_size": int64(0), "concurrency": int64(1)})
	w, _ := s.Create(ctx, sdk.Object{Key: "stuck", Size: -1})
	done := make(chan error, 1)
	go func() {
		var err error
		for err == nil {
			_, err = w.Write(make([]byte, 32*kib))
		}
		done <- err
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if err := w.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Write still blocked after Abort")
	}
	if time.Since(start) > 3*time.Second {
		t.Fatalf("Abort took %s", time.Since(start))
	}
	if err := w.Commit(ctx); err == nil {
		t.Fatal("Commit after Abort succeeded")
	}
	if _, ok := f.get("stuck"); ok || f.count("PUT blocklist") != 0 {
		t.Fatal("an aborted object was committed")
	}
}

// A cancelled context commits nothing.
func TestAzureSinkCancelled(t *testing.T) {
	f := newFake(t)
	s := newTestSink(t, f, nil)
	cctx, cancel := context.WithCancel(ctx)
	w, _ := s.Create(cctx, sdk.Object{Key: "cancelled", Size: -1})
	w.Write([]byte("some bytes"))
	cancel()
	if _, err := w.Write([]byte("more")); err == nil || !errors.Is(err, context.Canceled) {
		t.Fatalf("Write after cancel: %v", err)
	}
	if err := w.Commit(ctx); err == nil {
		t.Fatal("committed after cancel")
	}
	if _, ok := f.get("cancelled"); ok {
		t.Fatal("stored after cancel")
	}
}

// A commit whose answer is lost may have happened: the writer recognises
// its own blob by the upload id and takes it back.
func TestAzureSinkAmbiguousCommit(t *testing.T) {
	f := newFake(t)
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "PUT blocklist" {
			// Let the fake commit, then drop the connection instead of answering.
			f.handle(httptestRecorder{}, r)
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return true
		}
		return false
	})
	s := newTestSink(t, f, map[string]any{"max_single_put_size": int64(0), "retries": int64(0)})
	w, _ := s.Create(ctx, sdk.Object{Key: "lost", Size: -1})
	writeAll(t, w, randomBytes(4, 100*kib), 100*kib)
	if err := w.Commit(ctx); err == nil {
		t.Fatal("a commit without an answer succeeded")
	}
	if _, ok := f.get("lost"); ok {
		t.Fatal("the blob of a failed commit was left behind")
	}
}

// httptestRecorder discards a response (to run the fake's handler inside a
// hook).
type httptestRecorder struct{}

func (httptestRecorder) Header() http.Header         { return http.Header{} }
func (httptestRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (httptestRecorder) WriteHeader(int)             {}

func TestAzureSinkStorage(t *testing.T) {
	f := newFake(t)
	s := newTestSink(t, f, nil)
	for _, k := range []string{"r1/a.zst", "r1/b/c.zst", "r2/a.zst", "other"} {
		f.put(k, []byte(k))
	}
	list, err := s.List(ctx, "r1/")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Key != "r1/a.zst" || list[0].Size != 8 || list[0].Modified.IsZero() {
		t.Fatalf("%+v", list)
	}
	rc, err := s.Open(ctx, "r2/a.zst")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "r2/a.zst" {
		t.Fatalf("%q", b)
	}
	if _, err := s.Open(ctx, "nope"); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("Open of a missing blob: %v", err)
	}
	if err := s.Remove(ctx, "r1/a.zst"); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(ctx, "r1/a.zst"); err != nil {
		t.Fatalf("removing twice: %v", err)
	}
	if _, ok := f.get("r1/a.zst"); ok {
		t.Fatal("still there")
	}
	if _, err := s.Create(ctx, sdk.Object{Key: "/abs"}); err == nil {
		t.Fatal("a key with a leading / was accepted")
	}
}

// Ranges are fetched in parallel (at most concurrency), handed out in
// order, and a range whose transfer breaks is resumed.
func TestAzureReaderRanges(t *testing.T) {
	f := newFake(t)
	data := randomBytes(5, 10*64*kib+77)
	f.put("dir/obj", data)
	var cut atomic.Int32
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "range" {
			time.Sleep(10 * time.Millisecond)
			if strings.HasPrefix(r.Header.Get("x-ms-range"), "bytes=196608-") && cut.Add(1) == 1 {
				f.cutBody(w, r, "dir/obj")
				return true
			}
		}
		return false
	})
	src := newTestSource(t, f, map[string]any{"prefix": "dir/", "concurrency": int64(3)})
	infos, err := src.Streams(ctx)
	if err != nil || len(infos) != 1 || infos[0].Name != "obj" || infos[0].Size != int64(len(data)) {
		t.Fatalf("%+v %v", infos, err)
	}
	rc, err := src.Open(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read %d bytes, %v", len(got), err)
	}
	if cut.Load() != 1 {
		t.Fatal("the fault was not injected")
	}
	if m := f.maxFlight["range"]; m > 3 {
		t.Fatalf("%d ranges in flight, concurrency is 3", m)
	}
	if _, err := src.Open(ctx, "missing"); !errors.Is(err, sdk.ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	// Empty and one-byte blobs.
	f.setHook(nil)
	for _, b := range [][]byte{{}, {9}} {
		f.put("dir/small", b)
		rc, err := src.Open(ctx, "small")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(rc)
		rc.Close()
		if !bytes.Equal(got, b) {
			t.Fatalf("%q", got)
		}
	}
}

// A blob replaced while it is read fails the read instead of mixing
// versions.
func TestAzureReaderPinsETag(t *testing.T) {
	f := newFake(t)
	data := randomBytes(6, 4*64*kib)
	f.put("obj", data)
	var n atomic.Int32
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "range" && n.Add(1) == 2 {
			f.put("obj", randomBytes(7, 4*64*kib)) // replaced after the first range was served
		}
		return false
	})
	src := newTestSource(t, f, map[string]any{"concurrency": int64(1)})
	rc, err := src.Open(ctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	rc.Close()
	if err == nil || !strings.Contains(err.Error(), "ConditionNotMet") || !strings.Contains(err.Error(), "changed while it was being read") {
		t.Fatalf("err = %v", err)
	}
}

// Cancellation stops every range at once; Close does not hang.
func TestAzureReaderCancel(t *testing.T) {
	f := newFake(t)
	f.put("obj", randomBytes(8, 40*64*kib))
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "range" && !strings.HasPrefix(r.Header.Get("x-ms-range"), "bytes=0-") {
			<-r.Context().Done() // every range but the first hangs
			return true
		}
		return false
	})
	src := newTestSource(t, f, nil)
	cctx, cancel := context.WithCancel(ctx)
	rc, err := src.Open(cctx, "obj")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64*kib)
	if _, err := io.ReadFull(rc, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	start := time.Now()
	if _, err := io.ReadAll(rc); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
	rc.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("cancellation took %s", d)
	}
}

// A connection that stops moving bytes fails after timeout, with a clear
// error, instead of hanging.
func TestAzureStallTimeout(t *testing.T) {
	f := newFake(t)
	f.put("obj", randomBytes(9, 1000))
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		if kind == "range" {
			select {
			case <-r.Context().Done():
			case <-time.After(10 * time.Second):
			}
			return true
		}
		return false
	})
	src := newTestSource(t, f, map[string]any{"timeout": time.Second, "retries": int64(1)})
	start := time.Now()
	_, err := src.Open(ctx, "obj")
	if err == nil || !strings.Contains(err.Error(), "moved no byte") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Fatalf("took %s", d)
	}
}

func TestAzureSourceNames(t *testing.T) {
	f := newFake(t)
	for _, k := range []string{"pg/nightly/r1/db.zst", "pg/nightly/r1/pipe-manifest.json", "pg/nightly-old/x", "other"} {
		f.put(k, []byte(k))
	}
	for _, tc := range []struct {
		prefix, key string
		want        string
	}{
		{"pg/nightly/", "", "r1/db.zst r1/pipe-manifest.json"},
		{"pg/nightly", "", "nightly-old/x nightly/r1/db.zst nightly/r1/pipe-manifest.json"},
		{"", "", "other pg/nightly-old/x pg/nightly/r1/db.zst pg/nightly/r1/pipe-manifest.json"},
		{"", "pg/nightly/r1/db.zst", "db.zst"},
		{"pg/", "nightly/r1/db.zst", "db.zst"},
	} {
		src := newTestSource(t, f, map[string]any{"prefix": tc.prefix, "key": tc.key})
		infos, err := src.Streams(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, in := range infos {
			names = append(names, in.Name)
			rc, err := src.Open(ctx, in.Name)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(rc)
			rc.Close()
			if !strings.HasSuffix(string(b), in.Name) {
				t.Fatalf("%s read %q", in.Name, b)
			}
		}
		if got := strings.Join(names, " "); got != tc.want {
			t.Errorf("prefix %q key %q: %s, want %s", tc.prefix, tc.key, got, tc.want)
		}
	}
	src := newTestSource(t, f, map[string]any{"prefix": "nothing/"})
	if _, err := src.Streams(ctx); err == nil || !strings.Contains(err.Error(), "check prefix") {
		t.Fatalf("empty prefix: %v", err)
	}
	if _, err := src.Open(ctx, "../x"); err == nil {
		t.Fatal("opened ../x")
	}
}

func TestAzureConfigureProbe(t *testing.T) {
	f := newFake(t)
	_, d := SinkType{}.Configure(ctx, sdk.NewConfig(f.config(map[string]any{"bucket": "missing"})))
	if !d.HasErrors() || d[0].Attribute != "bucket" || !strings.Contains(d[0].Detail, "create it") {
		t.Fatalf("%+v", d)
	}
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		storageError(w, 403, "AuthenticationFailed")
		return true
	})
	_, d = SourceType{}.Configure(ctx, sdk.NewConfig(f.config(nil)))
	if !d.HasErrors() || !strings.Contains(d.Err().Error(), "refused the credentials") || strings.Contains(d.Err().Error(), fakeKey) {
		t.Fatalf("%+v", d)
	}
	// A write-only SAS may not read the container's properties: not an error.
	f.setHook(func(w http.ResponseWriter, r *http.Request, kind string) bool {
		storageError(w, 403, "AuthorizationPermissionMismatch")
		return true
	})
	if _, d = (SinkType{}).Configure(ctx, sdk.NewConfig(f.config(nil))); d.HasErrors() {
		t.Fatalf("%+v", d)
	}
}

// The SAS token travels in every URL; no error may repeat it.
func TestAzureSASNeverInErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	const sig = "SUPERSECRETSIGNATURE"
	vals := map[string]any{"bucket": "backups", "account_url": "http://" + addr + "/acct", "sas_token": "?sv=2021-08-06&sp=rwl&sig=" + sig,
		"retries": int64(0), "timeout": time.Second}
	s, d := SinkType{}.Configure(ctx, sdk.NewConfig(vals))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	w, _ := s.Create(ctx, sdk.Object{Key: "a", Size: -1})
	w.Write([]byte("x"))
	err = w.Commit(ctx)
	src, _ := SourceType{}.Configure(ctx, sdk.NewConfig(vals))
	_, oerr := src.Open(ctx, "a")
	_, lerr := src.Streams(ctx)
	for _, e := range []error{err, oerr, lerr} {
		if e == nil || strings.Contains(e.Error(), sig) || !strings.Contains(e.Error(), "refused") {
			t.Errorf("error %v", e)
		}
	}
	t.Log(fmt.Sprint(err))
}
