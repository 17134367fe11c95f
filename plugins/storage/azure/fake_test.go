package azure

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeBlobs is a small in-memory Blob service: containers, block blobs
// (Put Block, Put Block List, Put Blob), ranged GETs with If-Match, HEAD,
// DELETE and flat listings. hook may answer a request first, to inject
// faults. It checks Content-MD5 like the service does.
type fakeBlobs struct {
	t   *testing.T
	srv *httptest.Server

	mu         sync.Mutex
	containers map[string]bool
	blobs      map[string]*fakeBlob         // "container/name"
	staged     map[string]map[string][]byte // "container/name" → block id → data
	requests   []string                     // "METHOD comp path"
	inFlight   map[string]int               // by kind ("block", "range")
	maxFlight  map[string]int
	hook       func(w http.ResponseWriter, r *http.Request, kind string) bool
	etagSerial int
	// immutable says the containers have version-level immutability
	// support (their properties say so).
	immutable bool
}

type fakeBlob struct {
	data     []byte
	etag     string
	meta     map[string]string
	modified time.Time
}

const fakeAccount = "devstoreaccount1"

// fakeKey is a well-formed account key; the fake does not check signatures.
var fakeKey = base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("k"), 64))

func newFake(t *testing.T) *fakeBlobs {
	f := &fakeBlobs{t: t, containers: map[string]bool{"backups": true}, blobs: map[string]*fakeBlob{},
		staged: map[string]map[string][]byte{}, inFlight: map[string]int{}, maxFlight: map[string]int{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeBlobs) url() string { return f.srv.URL + "/" + fakeAccount }

// config returns the values of an endpoint using the fake.
func (f *fakeBlobs) config(extra map[string]any) map[string]any {
	m := map[string]any{"bucket": "backups", "account_url": f.url(), "account_key": fakeKey,
		"block_size": int64(64 * kib), "concurrency": int64(3), "timeout": 5 * time.Second, "retries": int64(2)}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func (f *fakeBlobs) setHook(h func(w http.ResponseWriter, r *http.Request, kind string) bool) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

func (f *fakeBlobs) put(name string, data []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.commit("backups/"+name, data, nil)
}

func (f *fakeBlobs) get(name string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.blobs["backups/"+name]
	if !ok {
		return nil, false
	}
	return b.data, true
}

func (f *fakeBlobs) count(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

func (f *fakeBlobs) commit(key string, data []byte, meta map[string]string) {
	f.etagSerial++
	f.blobs[key] = &fakeBlob{data: data, etag: fmt.Sprintf("\"0x%d\"", f.etagSerial), meta: meta, modified: time.Now().UTC()}
	delete(f.staged, key)
}

func storageError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("x-ms-error-code", code)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="utf-8"?><Error><Code>%s</Code><Message>fake: %s</Message></Error>`, code, code)
}

func (f *fakeBlobs) serve(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path := strings.TrimPrefix(r.URL.Path, "/"+fakeAccount+"/")
	_, name, _ := strings.Cut(path, "/")
	kind := r.Method + " " + q.Get("comp")
	switch {
	case r.Method == http.MethodPut && q.Get("comp") == "block":
		kind = "block"
	case r.Method == http.MethodGet && name != "" && q.Get("comp") == "":
		kind = "range"
	}
	f.mu.Lock()
	f.requests = append(f.requests, kind+" "+path)
	hook := f.hook
	f.inFlight[kind]++
	f.maxFlight[kind] = max(f.maxFlight[kind], f.inFlight[kind])
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.inFlight[kind]--
		f.mu.Unlock()
	}()
	if hook != nil && hook(w, r, kind) {
		return
	}
	f.handle(w, r)
}

// handle answers a request as the service would, without the hook.
func (f *fakeBlobs) handle(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	path := strings.TrimPrefix(r.URL.Path, "/"+fakeAccount+"/")
	cont, name, _ := strings.Cut(path, "/")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if m := r.Header.Get("Content-MD5"); m != "" {
		sum := md5.Sum(body)
		if m != base64.StdEncoding.EncodeToString(sum[:]) {
			storageError(w, 400, "Md5Mismatch")
			return
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.containers[cont] {
		storageError(w, 404, "ContainerNotFound")
		return
	}
	key := cont + "/" + name
	w.Header().Set("x-ms-request-id", "fake")
	switch {
	case name == "" && q.Get("comp") == "list":
		f.list(w, cont, q.Get("prefix"))
	case name == "" && r.Method == http.MethodGet, name == "" && r.Method == http.MethodHead:
		w.Header().Set("ETag", "\"0xc\"")
		if f.immutable {
			w.Header().Set("x-ms-immutable-storage-with-versioning-enabled", "true")
		}
		w.WriteHeader(200)
	case r.Method == http.MethodPut && q.Get("comp") == "block":
		if f.staged[key] == nil {
			f.staged[key] = map[string][]byte{}
		}
		f.staged[key][q.Get("blockid")] = body
		w.WriteHeader(201)
	case r.Method == http.MethodPut && q.Get("comp") == "blocklist":
		var list struct {
			Latest []string `xml:"Latest"`
		}
		if err := xml.Unmarshal(body, &list); err != nil {
			storageError(w, 400, "InvalidXmlDocument")
			return
		}
		var data []byte
		for _, id := range list.Latest {
			b, ok := f.staged[key][id]
			if !ok {
				storageError(w, 400, "InvalidBlockList")
				return
			}
			data = append(data, b...)
		}
		f.commit(key, data, meta(r))
		w.Header().Set("ETag", f.blobs[key].etag)
		w.WriteHeader(201)
	case r.Method == http.MethodPut:
		f.commit(key, body, meta(r))
		w.Header().Set("ETag", f.blobs[key].etag)
		w.WriteHeader(201)
	case r.Method == http.MethodDelete:
		b, ok := f.blobs[key]
		if !ok {
			storageError(w, 404, "BlobNotFound")
			return
		}
		if m := r.Header.Get("If-Match"); m != "" && m != b.etag {
			storageError(w, 412, "ConditionNotMet")
			return
		}
		delete(f.blobs, key)
		w.WriteHeader(202)
	case r.Method == http.MethodHead, r.Method == http.MethodGet:
		b, ok := f.blobs[key]
		if !ok {
			w.Header().Set("x-ms-error-code", "BlobNotFound")
			if r.Method == http.MethodHead {
				w.WriteHeader(404)
			} else {
				storageError(w, 404, "BlobNotFound")
			}
			return
		}
		if m := r.Header.Get("If-Match"); m != "" && m != b.etag {
			storageError(w, 412, "ConditionNotMet")
			return
		}
		w.Header().Set("ETag", b.etag)
		w.Header().Set("Last-Modified", b.modified.Format(http.TimeFormat))
		w.Header().Set("x-ms-blob-type", "BlockBlob")
		for k, v := range b.meta {
			w.Header().Set("x-ms-meta-"+k, v)
		}
		data := b.data
		status := 200
		if rg := r.Header.Get("x-ms-range"); rg != "" && r.Method == http.MethodGet {
			var from, to int64
			fmt.Sscanf(rg, "bytes=%d-%d", &from, &to)
			if from >= int64(len(data)) {
				storageError(w, 416, "InvalidRange")
				return
			}
			to = min(to, int64(len(data))-1)
			w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(data)))
			data = data[from : to+1]
			status = 206
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(status)
		if r.Method == http.MethodGet {
			w.Write(data)
		}
	default:
		storageError(w, 400, "UnsupportedHttpVerb")
	}
}

func meta(r *http.Request) map[string]string {
	m := map[string]string{}
	for k, v := range r.Header {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-ms-meta-") {
			m[strings.TrimPrefix(lk, "x-ms-meta-")] = v[0]
		}
	}
	return m
}

func (f *fakeBlobs) list(w http.ResponseWriter, cont, prefix string) {
	var names []string
	for k := range f.blobs {
		c, n, _ := strings.Cut(k, "/")
		if c == cont && strings.HasPrefix(n, prefix) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="%s" ContainerName="%s"><Blobs>`, f.url(), cont)
	for _, n := range names {
		bl := f.blobs[cont+"/"+n]
		fmt.Fprintf(&b, `<Blob><Name>%s</Name><Properties><Last-Modified>%s</Last-Modified><Etag>%s</Etag><Content-Length>%d</Content-Length><BlobType>BlockBlob</BlobType></Properties></Blob>`,
			xmlEscape(n), bl.modified.Format(http.TimeFormat), bl.etag, len(bl.data))
	}
	b.WriteString(`</Blobs><NextMarker/></EnumerationResults>`)
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(200)
	io.WriteString(w, b.String())
}

func xmlEscape(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}

// cutBody answers a ranged GET of blob name with its headers and half its
// body, then drops the connection.
func (f *fakeBlobs) cutBody(w http.ResponseWriter, r *http.Request, name string) {
	f.mu.Lock()
	b := f.blobs["backups/"+name]
	f.mu.Unlock()
	var from, to int64
	fmt.Sscanf(r.Header.Get("x-ms-range"), "bytes=%d-%d", &from, &to)
	to = min(to, int64(len(b.data))-1)
	part := b.data[from : to+1]
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	fmt.Fprintf(buf, "HTTP/1.1 206 Partial Content\r\nContent-Length: %d\r\nContent-Range: bytes %d-%d/%d\r\nETag: %s\r\nx-ms-blob-type: BlockBlob\r\n\r\n",
		len(part), from, to, len(b.data), b.etag)
	buf.Write(part[:len(part)/2])
	buf.Flush()
}
