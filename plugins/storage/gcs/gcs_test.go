package gcs

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/googleapi"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/bulkhttp"
)

func testClient() *client {
	return &client{bucket: "bkt", retries: 5, where: "storage.googleapis.com", auth: "Application Default Credentials", scrub: newScrubber("")}
}

func TestGCSSchemas(t *testing.T) {
	src, snk := SourceType{}.Schema(), SinkType{}.Schema()
	for _, s := range []sdk.Schema{src, snk} {
		if err := s.Validate(); err != nil {
			t.Fatal(err)
		}
		if a, ok := s.Attribute("credentials_json"); !ok || !a.Secret {
			t.Error("credentials_json must be a secret attribute")
		}
		if a, ok := s.Attribute("bucket"); !ok || !a.Required {
			t.Error("bucket must be required")
		}
	}
	if _, ok := src.KeyAttribute(); ok {
		t.Error("the source declares a key attribute")
	}
	if a, ok := snk.KeyAttribute(); !ok || a.Name != "key" {
		t.Error("the sink's key attribute must be key")
	}
	if !snk.Storage {
		t.Error("the sink must be a storage sink")
	}
	for _, tc := range []struct {
		s             sdk.Schema
		name, profile string
	}{{snk, "chunk_size", "part_size"}, {src, "part_size", "part_size"}, {src, "concurrency", "concurrency"}} {
		if a, ok := tc.s.Attribute(tc.name); !ok || a.Profile != tc.profile {
			t.Errorf("%s: profile %q, want %q", tc.name, a.Profile, tc.profile)
		}
	}
}

func TestGCSCheckBucket(t *testing.T) {
	for name, want := range map[string]string{
		"acme-backups":          "",
		"a.b_c-1":               "",
		"gs://acme/pg":          `without gs:// (bucket = "acme")`,
		"acme/pg":               "holds a path",
		"ab":                    "3 to 63",
		strings.Repeat("a", 64): "at most 63",
		"Acme":                  "lowercase",
		"-acme":                 "start and end",
	} {
		err := checkBucket(name)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", name, err, want)
		}
	}
}

func TestGCSEndpointURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://127.0.0.1:4443":                      "http://127.0.0.1:4443/storage/v1/",
		"http://localhost:4443/":                     "http://localhost:4443/storage/v1/",
		"https://storage.googleapis.com/storage/v1/": "https://storage.googleapis.com/storage/v1/",
		"https://private.example/storage/v1":         "https://private.example/storage/v1/",
		"localhost:4443":                             "ERR no scheme",
		"ftp://x":                                    "ERR scheme must be",
		"http://user:pw@host":                        "ERR user or password",
	} {
		u, err := endpointURL(in)
		switch {
		case strings.HasPrefix(want, "ERR "):
			if err == nil || !strings.Contains(err.Error(), want[4:]) {
				t.Errorf("%q: %v, want an error with %q", in, err, want[4:])
			}
			if err != nil && strings.Contains(err.Error(), "pw") {
				t.Errorf("%q: the error repeats the password: %v", in, err)
			}
		case err != nil || u.String() != want:
			t.Errorf("%q: %v %v, want %s", in, u, err, want)
		}
	}
}

func TestGCSChooseAuth(t *testing.T) {
	for _, tc := range []struct {
		c        config
		emulator string
		want     authMode
	}{
		{config{}, "", authADC},
		{config{CredentialsFile: "k.json"}, "", authExplicit},
		{config{CredentialsJSON: "{}"}, "", authExplicit},
		{config{}, "localhost:4443", authAnonymous},
		{config{CredentialsFile: "k.json"}, "localhost:4443", authAnonymous}, // as the library does
		{config{Endpoint: "http://localhost:4443"}, "", authAnonymous},
		{config{Endpoint: "http://gcs.internal", CredentialsFile: "k.json"}, "", authExplicit},
		{config{Endpoint: "https://private.example"}, "", authADCOrNone},
		{config{Endpoint: "http://localhost:4443"}, "other:1", authAnonymous},
	} {
		if got := chooseAuth(&tc.c, tc.emulator); got != tc.want {
			t.Errorf("%+v with %q: %d, want %d", tc.c, tc.emulator, got, tc.want)
		}
	}
}

func TestGCSConfigCheck(t *testing.T) {
	c := config{Bucket: "b-1", CredentialsFile: "f", CredentialsJSON: "j", Timeout: -1, Retries: -1, Endpoint: "nope"}
	d := c.check()
	attrs := map[string]bool{}
	for _, x := range d {
		attrs[x.Attribute] = true
	}
	for _, a := range []string{"credentials_json", "timeout", "retries", "endpoint"} {
		if !attrs[a] {
			t.Errorf("no diagnostic about %s in %v", a, d.Err())
		}
	}
	ok := config{Bucket: "bkt", Timeout: time.Second, Retries: 3}
	if d := ok.check(); d.HasErrors() {
		t.Fatal(d.Err())
	}
}

// Configure with an endpoint does no I/O: these run without a server.
func configureSource(t *testing.T, vals map[string]any) (*Source, sdk.Diagnostics) {
	t.Helper()
	base := map[string]any{"bucket": "bkt", "endpoint": "http://127.0.0.1:1", "timeout": time.Second, "retries": int64(0),
		"part_size": int64(1 << 20), "concurrency": int64(2), "credentials_file": "", "credentials_json": ""}
	for k, v := range vals {
		base[k] = v
	}
	src, d := SourceType{}.Configure(context.Background(), sdk.NewConfig(base))
	if src == nil {
		return nil, d
	}
	s := src.(*Source)
	t.Cleanup(func() { s.Close() })
	return s, d
}

func TestGCSSourceConfigure(t *testing.T) {
	for _, tc := range []struct {
		vals      map[string]any
		root, key string
		list      bool
		err       string
	}{
		{vals: map[string]any{"prefix": "pg/nightly/"}, root: "pg/nightly/", list: true},
		{vals: map[string]any{"prefix": "pg/nightly"}, root: "pg/", list: true},
		{vals: map[string]any{"prefix": ""}, root: "", list: true},
		{vals: map[string]any{"key": "pg/run/pipe-manifest.json"}, root: "pg/run/", key: "pipe-manifest.json"},
		{vals: map[string]any{"key": "db.dump"}, root: "", key: "db.dump"},
		{vals: map[string]any{"prefix": "pg/nightly", "key": "run/pipe-manifest.json"}, root: "pg/nightly/", key: "run/pipe-manifest.json"},
		{vals: map[string]any{}, err: "nothing to read"},
		{vals: map[string]any{"prefix": "/pg/"}, err: `write "pg/"`},
		{vals: map[string]any{"key": "pg/"}, err: "use prefix"},
		{vals: map[string]any{"prefix": "p/", "part_size": int64(10)}, err: "part_size"},
		{vals: map[string]any{"prefix": "p/", "concurrency": int64(0)}, err: "concurrency"},
		{vals: map[string]any{"prefix": "p/", "bucket": "gs://bkt"}, err: "without gs://"},
	} {
		s, d := configureSource(t, tc.vals)
		if tc.err != "" {
			if !d.HasErrors() || !strings.Contains(d.Err().Error(), tc.err) {
				t.Errorf("%v: %v, want %q", tc.vals, d.Err(), tc.err)
			}
			continue
		}
		if d.HasErrors() {
			t.Errorf("%v: %v", tc.vals, d.Err())
			continue
		}
		if s.root != tc.root || s.key != tc.key || s.list != tc.list {
			t.Errorf("%v: root %q key %q list %v, want %q %q %v", tc.vals, s.root, s.key, s.list, tc.root, tc.key, tc.list)
		}
	}
}

func TestGCSSinkConfigure(t *testing.T) {
	base := map[string]any{"bucket": "bkt", "endpoint": "http://127.0.0.1:1", "timeout": time.Second, "retries": int64(0), "credentials_file": "", "credentials_json": ""}
	for chunk, want := range map[int64]string{100: "chunk_size", 2 << 30: "chunk_size", 300 << 10: ""} {
		base["chunk_size"] = chunk
		s, d := SinkType{}.Configure(context.Background(), sdk.NewConfig(base))
		if want != "" {
			if !d.HasErrors() || !strings.Contains(d.Err().Error(), want) {
				t.Errorf("chunk %d: %v", chunk, d.Err())
			}
			continue
		}
		if d.HasErrors() {
			t.Fatal(d.Err())
		}
		if got := s.(*Sink).chunk; got != 512<<10 {
			t.Errorf("chunk %d rounds to %d, want 512KiB", chunk, got)
		}
		s.(*Sink).Close()
	}
	base["chunk_size"] = int64(1 << 20)
	base["credentials_file"] = filepath.Join(t.TempDir(), "missing.json")
	if _, d := (SinkType{}).Configure(context.Background(), sdk.NewConfig(base)); !d.HasErrors() || d[0].Attribute != "credentials_file" || !strings.Contains(d.Err().Error(), "check the path") {
		t.Fatalf("a missing credentials file: %v", d.Err())
	}
}

func TestGCSMemory(t *testing.T) {
	snk := SinkType{}.Memory(sdk.NewConfig(map[string]any{"chunk_size": int64(8 << 20)}), 3)
	if want := 3 * (8<<20 + streamOverhead); snk != want {
		t.Errorf("sink: %d, want %d", snk, want)
	}
	if d := (SinkType{}).Memory(sdk.NewConfig(nil), 1); d != defaultPartSize+streamOverhead {
		t.Errorf("sink default: %d", d)
	}
	src := SourceType{}.Memory(sdk.NewConfig(map[string]any{"part_size": int64(4 << 20), "concurrency": int64(5)}), 2)
	if want := 2 * (5*4<<20 + streamOverhead); src != want {
		t.Errorf("source: %d, want %d", src, want)
	}
}

// Objects of at most a WAL segment take the chunk chunkFor gives them, and
// their ranges; larger ones as many as Memory counts.
func TestGCSSmallObjectMemory(t *testing.T) {
	snk := sdk.NewConfig(map[string]any{"chunk_size": int64(64 << 20)})
	if got, want := (SinkType{}).SmallObjectMemory(snk, 8, 16<<20), 8*(16<<20+chunkUnit+streamOverhead); got != want {
		t.Errorf("sink, 16 MiB objects: %d, want %d", got, want)
	}
	if got, want := (SinkType{}).SmallObjectMemory(snk, 2, 1<<30), (SinkType{}).Memory(snk, 2); got != want {
		t.Errorf("sink, objects larger than a chunk: %d, Memory %d", got, want)
	}
	src := sdk.NewConfig(map[string]any{"part_size": int64(64 << 20), "concurrency": int64(4)})
	if got, want := (SourceType{}).SmallObjectMemory(src, 8, 16<<20), 8*(16<<20+streamOverhead); got != want {
		t.Errorf("source, 16 MiB objects: %d, want %d", got, want)
	}
	if got, want := (SourceType{}).SmallObjectMemory(src, 2, 1<<30), (SourceType{}).Memory(src, 2); got != want {
		t.Errorf("source, large objects: %d, Memory %d", got, want)
	}
}

func TestGCSChunkFor(t *testing.T) {
	const chunk = 16 << 20
	for _, tc := range []struct {
		size, max, want int64
	}{
		{-1, -1, chunk},
		{0, 0, 256 << 10},
		{1000, 1000, 256 << 10},
		{256 << 10, 256 << 10, 512 << 10}, // one byte more must fit
		{-1, 5 << 20, 5<<20 + 256<<10},
		{-1, 100 << 20, chunk},
		{chunk, chunk, chunk},
	} {
		if got := chunkFor(chunk, sdk.Object{Size: tc.size, MaxSize: tc.max}); got != tc.want {
			t.Errorf("size %d max %d: %d, want %d", tc.size, tc.max, got, tc.want)
		}
	}
}

func TestGCSCheckKey(t *testing.T) {
	for key, want := range map[string]string{
		"pg/run/db.dump.zst":      "",
		"":                        "empty",
		"/backups/x":              "do not start with /",
		"a\nb":                    "line breaks",
		"dir/":                    "not an object name",
		strings.Repeat("k", 1025): "1024",
	} {
		err := checkKey(key)
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%q: %v, want %q", key, err, want)
		}
	}
}

func serviceAccountJSON(t *testing.T, privateKey, tokenURI string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "proj", "private_key_id": "0123456789abcdef0123",
		"private_key": privateKey, "client_email": "backup@proj.iam.gserviceaccount.com",
		"client_id": "123456789012345678901", "token_uri": tokenURI,
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func rsaKeyPEM(t *testing.T) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
}

func TestGCSScrubber(t *testing.T) {
	key := rsaKeyPEM(t)
	js := serviceAccountJSON(t, key, "https://oauth2.googleapis.com/token")
	s := newScrubber(js)
	line := strings.Split(key, "\n")[3]
	msg := s.clean("bad key near " + line + " in " + js + " for backup@proj.iam.gserviceaccount.com; Put \"http://h/upload?upload_id=SECRETID&x=1\": reset; Post https://oauth2.googleapis.com/token: refused")
	for _, leak := range []string{line, "0123456789abcdef0123", "SECRETID", "PRIVATE KEY-----\nMII"} {
		if strings.Contains(msg, leak) {
			t.Errorf("%q survives: %s", leak, msg)
		}
	}
	if !strings.Contains(msg, "backup@proj.iam.gserviceaccount.com") || !strings.Contains(msg, "http://h/upload?…") || !strings.Contains(msg, "Post https://oauth2.googleapis.com/token: refused") {
		t.Errorf("too much scrubbed: %s", msg)
	}
}

func TestGCSExplain(t *testing.T) {
	c := testClient()
	c.scrub = newScrubber(`{"type":"service_account","private_key":"TOPSECRETKEYMATERIAL"}`)
	for _, tc := range []struct {
		err      error
		want     []string
		notFound bool
	}{
		{storage.ErrObjectNotExist, []string{"reading gs://bkt/k: no such object"}, true},
		{storage.ErrBucketNotExist, []string{"does not exist", "gcloud storage buckets create gs://bkt"}, true},
		{&googleapi.Error{Code: 401, Message: "Invalid Credentials"}, []string{"HTTP 401: Invalid Credentials", "credentials were refused"}, false},
		{&googleapi.Error{Code: 403, Message: "x does not have storage.objects.get access"}, []string{"HTTP 403", "roles/storage.objectUser"}, false},
		{&googleapi.Error{Code: 404}, []string{"HTTP 404"}, true},
		{&googleapi.Error{Code: 503}, []string{"HTTP 503", "after 5 retries"}, false},
		{&googleapi.Error{Code: 429}, []string{"rate limited"}, false},
		{&url.Error{Op: "Get", URL: "http://h/x?upload_id=abc", Err: &bulkhttp.StallError{After: 30 * time.Second}}, []string{"no byte moved for 30s", "raise timeout"}, false},
		{&url.Error{Op: "Get", URL: "http://127.0.0.1:1/x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}}, []string{"cannot reach", "STORAGE_EMULATOR_HOST"}, false},
		{context.Canceled, []string{"reading gs://bkt/k: cancelled"}, false},
		{fmt.Errorf("parse: bad key TOPSECRETKEYMATERIAL"), []string{"(sensitive)"}, false},
	} {
		err := c.explain("reading", "k", tc.err)
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %q lacks %q", tc.err, err, w)
			}
		}
		if errors.Is(err, sdk.ErrNotFound) != tc.notFound {
			t.Errorf("%v: wraps ErrNotFound: %v", tc.err, !tc.notFound)
		}
		if strings.Contains(err.Error(), "TOPSECRET") || strings.Contains(err.Error(), "upload_id=abc") {
			t.Errorf("a secret survives: %s", err)
		}
	}
	if !errors.Is(c.explain("uploading", "k", context.Canceled), context.Canceled) {
		t.Error("a cancelled operation does not wrap context.Canceled")
	}
}

func TestGCSRetriable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{io.ErrUnexpectedEOF, true},
		{&googleapi.Error{Code: 503}, true},
		{&googleapi.Error{Code: 429}, true},
		{&googleapi.Error{Code: 403}, false},
		{storage.ErrObjectNotExist, false},
		{context.Canceled, false},
		{errChanged, false},
		{&bulkhttp.StallError{After: time.Second}, true},
	} {
		if got := retriable(tc.err); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestGCSCredentialsFromJSON(t *testing.T) {
	for js, want := range map[string]string{
		"not json":            "not a JSON credentials file",
		`{"private_key":"x"}`: `no "type"`,
		`{"type":"api_key"}`:  "not supported",
		serviceAccountJSON(t, rsaKeyPEM(t), "https://oauth2.googleapis.com/token"): "",
	} {
		_, err := credentialsFromJSON([]byte(js))
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%.30q: %v, want %q", js, err, want)
		}
	}
}

// fakeGCS answers the bucket check with status and counts requests.
func fakeGCS(t *testing.T, status int) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if r.URL.Path == "/token" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(400)
			io.WriteString(w, `{"error":"invalid_grant","error_description":"Invalid JWT Signature."}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"error":{"code":%d,"message":"status %d"}}`, status, status)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func configureSink(t *testing.T, endpoint string, vals map[string]any) *Sink {
	t.Helper()
	base := map[string]any{"bucket": "bkt", "endpoint": endpoint, "timeout": 5 * time.Second, "retries": int64(1),
		"chunk_size": int64(256 << 10), "credentials_file": "", "credentials_json": ""}
	for k, v := range vals {
		base[k] = v
	}
	s, d := SinkType{}.Configure(context.Background(), sdk.NewConfig(base))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	t.Cleanup(func() { s.(*Sink).Close() })
	return s.(*Sink)
}

// The bucket is checked once, before the first object: a missing bucket
// fails Create; a 403 (no permission on the bucket's metadata) does not.
func TestGCSSinkChecksBucket(t *testing.T) {
	srv, n := fakeGCS(t, 404)
	s := configureSink(t, srv.URL, nil)
	for i := 0; i < 2; i++ {
		_, err := s.Create(context.Background(), sdk.Object{Key: "a/b", Size: -1, MaxSize: -1})
		if err == nil || !strings.Contains(err.Error(), "checking the bucket gs://bkt") || !strings.Contains(err.Error(), `check bucket = "bkt"`) {
			t.Fatalf("err = %v", err)
		}
		t.Log(err)
	}
	if n.Load() != 1 {
		t.Fatalf("%d requests, want one check", n.Load())
	}
	srv, _ = fakeGCS(t, 403)
	s = configureSink(t, srv.URL, nil)
	w, err := s.Create(context.Background(), sdk.Object{Key: "a/b", Size: -1, MaxSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	w.Abort(context.Background())
	if _, err := s.Create(context.Background(), sdk.Object{Key: "/a", Size: -1, MaxSize: -1}); err == nil || !strings.Contains(err.Error(), "do not start with /") {
		t.Fatalf("err = %v", err)
	}
}

// Credentials that the token endpoint refuses fail the first object with
// an error that names the problem and holds no part of the credentials.
func TestGCSSinkRefusedCredentials(t *testing.T) {
	srv, _ := fakeGCS(t, 200)
	key := rsaKeyPEM(t)
	js := serviceAccountJSON(t, key, srv.URL+"/token?client_secret=QUERYSECRET")
	s := configureSink(t, srv.URL, map[string]any{"credentials_json": js})
	_, err := s.Create(context.Background(), sdk.Object{Key: "a/b", Size: -1, MaxSize: -1})
	if err == nil || !strings.Contains(err.Error(), "access token") {
		t.Fatalf("err = %v", err)
	}
	t.Log(err)
	for _, leak := range append(strings.Split(key, "\n")[1:4], "QUERYSECRET", "0123456789abcdef0123") {
		if strings.Contains(err.Error(), leak) {
			t.Fatalf("the error repeats a secret (%q): %s", leak, err)
		}
	}
	// The same from a file.
	f := filepath.Join(t.TempDir(), "sa.json")
	if err := os.WriteFile(f, []byte(js), 0o600); err != nil {
		t.Fatal(err)
	}
	s = configureSink(t, srv.URL, map[string]any{"credentials_file": f})
	if _, err := s.Create(context.Background(), sdk.Object{Key: "a/b", Size: -1, MaxSize: -1}); err == nil || strings.Contains(err.Error(), "QUERYSECRET") {
		t.Fatalf("err = %v", err)
	}
}

// A stalled server fails requests after the timeout, with an error the
// storage library retries like a dropped connection.
func TestGCSStallRetried(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stall-body" {
			w.Write(make([]byte, 1000))
			w.(http.Flusher).Flush()
		}
		<-release
	}))
	defer srv.Close()
	defer close(release) // before Close, which waits for the handlers
	hc := &http.Client{Transport: newTransport(200 * time.Millisecond)}
	for _, path := range []string{"/stall-headers", "/stall-body"} {
		start := time.Now()
		resp, err := hc.Get(srv.URL + path)
		if err == nil {
			_, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		var se *bulkhttp.StallError
		if !errors.As(err, &se) || !storage.ShouldRetry(err) || time.Since(start) > 2*time.Second {
			t.Errorf("%s: %v after %s", path, err, time.Since(start))
		}
	}
}
