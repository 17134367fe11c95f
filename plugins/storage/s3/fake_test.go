package s3

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// fakeS3 is a minimal S3 for unit tests: single and multipart uploads
// (checking the checksums and the signed SHA-256 of what it receives), ranged GETs, deletes, lists,
// and hooks to make requests fail, stall or break off.
type fakeS3 struct {
	t   *testing.T
	srv *httptest.Server

	mu         sync.Mutex
	objects    map[string][]byte
	uploads    map[string]map[int][]byte // by upload id
	uploadKeys map[string]string         // the key of each upload id
	nextID     int
	requests   []string               // "METHOD key?query range"
	putHeaders map[string]http.Header // of the last PutObject of each key
	aborted    int

	// hooks, called with mu unlocked; return true when they answered.
	onPart func(w http.ResponseWriter, r *http.Request, num int) bool
	onGet  func(w http.ResponseWriter, r *http.Request, rng string, body []byte) bool
	// onCreate is called before a CreateMultipartUpload is done; start
	// does it and returns the new upload's id.
	onCreate func(w http.ResponseWriter, r *http.Request, start func() string) bool
	// onPut is called after a PutObject stored its object, before the
	// answer.
	onPut func(w http.ResponseWriter, r *http.Request) bool
}

func newFake(t *testing.T) *fakeS3 {
	f := unstartedFake(t)
	f.srv.Start()
	return f
}

// unstartedFake is a fake whose server the caller starts (with TLS, say).
func unstartedFake(t *testing.T) *fakeS3 {
	f := &fakeS3{t: t, objects: map[string][]byte{}, uploads: map[string]map[int][]byte{}, uploadKeys: map[string]string{}}
	f.srv = httptest.NewUnstartedServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeS3) config(extra map[string]any) map[string]any {
	c := map[string]any{"bucket": "b", "endpoint": f.srv.URL, "path_style": true, "region": "us-east-1",
		"access_key_id": "AKIDFAKE", "secret_access_key": "fake-secret", "retries": int64(2)}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

func s3err(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, "<Error><Code>%s</Code><Message>%s from the fake</Message></Error>", code, code)
}

func (f *fakeS3) log(r *http.Request, key string) {
	f.mu.Lock()
	f.requests = append(f.requests, strings.TrimSpace(fmt.Sprintf("%s %s?%s %s", r.Method, key, r.URL.RawQuery, r.Header.Get("Range"))))
	f.mu.Unlock()
}

func (f *fakeS3) count(prefix string) int {
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

// listings counts the ListMultipartUploads requests.
func (f *fakeS3) listings() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.requests {
		if q, ok := strings.CutPrefix(r, "GET ?"); ok && slices.Contains(strings.Split(q, "&"), "uploads=") {
			n++
		}
	}
	return n
}

func (f *fakeS3) object(key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.objects[key]
	return b, ok
}

func (f *fakeS3) openUploads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.uploads)
}

func crc(b []byte, tab *crc32.Table) string {
	var out [4]byte
	binary.BigEndian.PutUint32(out[:], crc32.Checksum(b, tab))
	return base64.StdEncoding.EncodeToString(out[:])
}

// checkCRC checks what S3 checks of a body: the checksum headers sent
// with it and, when the payload is signed (plain HTTP), its SHA-256.
func checkCRC(r *http.Request, body []byte) bool {
	sum := sha256.Sum256(body)
	for h, want := range map[string]string{
		"X-Amz-Checksum-Crc32c": crc(body, crc32.MakeTable(crc32.Castagnoli)),
		"X-Amz-Checksum-Crc32":  crc(body, crc32.IEEETable),
		"X-Amz-Checksum-Sha256": base64.StdEncoding.EncodeToString(sum[:]),
	} {
		if v := r.Header.Get(h); v != "" && v != want {
			return false
		}
	}
	payload := r.Header.Get("X-Amz-Content-Sha256")
	return payload == "UNSIGNED-PAYLOAD" || payload == hex.EncodeToString(sum[:])
}

func (f *fakeS3) serve(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ := strings.Cut(path, "/")
	if bucket != "b" {
		s3err(w, 404, "NoSuchBucket")
		return
	}
	q := r.URL.Query()
	f.log(r, key)
	switch {
	case r.Method == "GET" && q.Get("list-type") == "2":
		f.mu.Lock()
		var keys []string
		for k := range f.objects {
			if strings.HasPrefix(k, q.Get("prefix")) {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		fmt.Fprintf(w, "<ListBucketResult><Name>b</Name><KeyCount>%d</KeyCount><IsTruncated>false</IsTruncated>", len(keys))
		for _, k := range keys {
			fmt.Fprintf(w, "<Contents><Key>%s</Key><Size>%d</Size><LastModified>2026-01-02T03:04:05.000Z</LastModified></Contents>", k, len(f.objects[k]))
		}
		fmt.Fprint(w, "</ListBucketResult>")
		f.mu.Unlock()
	case r.Method == "GET" && q.Has("uploads"):
		f.mu.Lock()
		var ids []string
		for id, k := range f.uploadKeys {
			if _, open := f.uploads[id]; open && strings.HasPrefix(k, q.Get("prefix")) {
				ids = append(ids, id)
			}
		}
		sort.Strings(ids)
		fmt.Fprint(w, "<ListMultipartUploadsResult><Bucket>b</Bucket><IsTruncated>false</IsTruncated>")
		for _, id := range ids {
			fmt.Fprintf(w, "<Upload><Key>%s</Key><UploadId>%s</UploadId></Upload>", f.uploadKeys[id], id)
		}
		fmt.Fprint(w, "</ListMultipartUploadsResult>")
		f.mu.Unlock()
	case r.Method == "POST" && q.Has("uploads"):
		start := func() string {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.nextID++
			id := fmt.Sprintf("up%d", f.nextID)
			f.uploads[id] = map[int][]byte{}
			f.uploadKeys[id] = key
			return id
		}
		if f.onCreate != nil && f.onCreate(w, r, start) {
			return
		}
		id := start()
		fmt.Fprintf(w, "<InitiateMultipartUploadResult><Bucket>b</Bucket><Key>%s</Key><UploadId>%s</UploadId></InitiateMultipartUploadResult>", key, id)
	case r.Method == "PUT" && q.Has("uploadId"):
		num, _ := strconv.Atoi(q.Get("partNumber"))
		if f.onPart != nil && f.onPart(w, r, num) {
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if !checkCRC(r, body) {
			s3err(w, 400, "BadDigest")
			return
		}
		f.mu.Lock()
		up, ok := f.uploads[q.Get("uploadId")]
		if ok {
			up[num] = body
		}
		f.mu.Unlock()
		if !ok {
			s3err(w, 404, "NoSuchUpload")
			return
		}
		w.Header().Set("ETag", fmt.Sprintf(`"etag-%d"`, num))
	case r.Method == "POST" && q.Has("uploadId"):
		var req struct {
			Parts []struct {
				PartNumber     int
				ETag           string
				ChecksumCRC32C string
			} `xml:"Part"`
		}
		if err := xml.NewDecoder(r.Body).Decode(&req); err != nil {
			s3err(w, 400, "MalformedXML")
			return
		}
		f.mu.Lock()
		up, ok := f.uploads[q.Get("uploadId")]
		var all []byte
		bad := false
		for i, p := range req.Parts {
			b, have := up[p.PartNumber]
			if p.PartNumber != i+1 || !have || (p.ChecksumCRC32C != "" && p.ChecksumCRC32C != crc(b, crc32.MakeTable(crc32.Castagnoli))) {
				bad = true
			}
			all = append(all, b...)
		}
		if ok && !bad {
			f.objects[key] = all
			delete(f.uploads, q.Get("uploadId"))
		}
		f.mu.Unlock()
		switch {
		case !ok:
			s3err(w, 404, "NoSuchUpload")
		case bad:
			s3err(w, 400, "InvalidPart")
		default:
			fmt.Fprintf(w, "<CompleteMultipartUploadResult><Bucket>b</Bucket><Key>%s</Key><ETag>\"x-%d\"</ETag></CompleteMultipartUploadResult>", key, len(req.Parts))
		}
	case r.Method == "DELETE" && q.Has("uploadId"):
		f.mu.Lock()
		_, ok := f.uploads[q.Get("uploadId")]
		delete(f.uploads, q.Get("uploadId"))
		f.aborted++
		f.mu.Unlock()
		if !ok {
			s3err(w, 404, "NoSuchUpload")
			return
		}
		w.WriteHeader(204)
	case r.Method == "PUT":
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		if !checkCRC(r, body) {
			s3err(w, 400, "BadDigest")
			return
		}
		f.mu.Lock()
		if _, exists := f.objects[key]; exists && r.Header.Get("If-None-Match") == "*" {
			f.mu.Unlock()
			s3err(w, 412, "PreconditionFailed")
			return
		}
		f.objects[key] = body
		if f.putHeaders == nil {
			f.putHeaders = map[string]http.Header{}
		}
		f.putHeaders[key] = r.Header.Clone()
		f.mu.Unlock()
		if f.onPut != nil && f.onPut(w, r) {
			return
		}
		w.Header().Set("ETag", `"single"`)
	case r.Method == "DELETE":
		f.mu.Lock()
		delete(f.objects, key)
		f.mu.Unlock()
		w.WriteHeader(204)
	case r.Method == "HEAD" || r.Method == "GET":
		body, ok := f.object(key)
		if !ok {
			if r.Method == "HEAD" {
				w.WriteHeader(404)
				return
			}
			s3err(w, 404, "NoSuchKey")
			return
		}
		etag := fmt.Sprintf(`"v%d"`, len(body))
		f.mu.Lock()
		for k, v := range f.putHeaders[key] {
			if strings.HasPrefix(strings.ToLower(k), "x-amz-meta-") {
				w.Header()[k] = v
			}
		}
		f.mu.Unlock()
		if m := r.Header.Get("If-Match"); m != "" && m != etag {
			s3err(w, 412, "PreconditionFailed")
			return
		}
		w.Header().Set("ETag", etag)
		rng := r.Header.Get("Range")
		if r.Method == "HEAD" || rng == "" {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
			if r.Method == "GET" {
				w.Write(body)
			}
			return
		}
		var from, to int
		if _, err := fmt.Sscanf(rng, "bytes=%d-%d", &from, &to); err != nil {
			s3err(w, 400, "InvalidArgument")
			return
		}
		if from >= len(body) {
			s3err(w, 416, "InvalidRange")
			return
		}
		to = min(to, len(body)-1)
		part := body[from : to+1]
		if f.onGet != nil && f.onGet(w, r, rng, part) {
			return
		}
		w.Header().Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", from, to, len(body)))
		w.Header().Set("Content-Length", strconv.Itoa(len(part)))
		w.WriteHeader(206)
		w.Write(part)
	default:
		s3err(w, 400, "NotImplemented")
	}
}

// cut answers a ranged GET with its headers and only the first n bytes of
// its body, then drops the connection: a reset in the middle of a range.
func cut(w http.ResponseWriter, rng string, body []byte, total, n int) {
	var from, to int
	fmt.Sscanf(rng, "bytes=%d-%d", &from, &to)
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	writeHead(buf, from, from+len(body)-1, total, len(body))
	buf.Write(body[:n])
	buf.Flush()
}

func writeHead(buf *bufio.ReadWriter, from, to, total, length int) {
	fmt.Fprintf(buf, "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes %d-%d/%d\r\nContent-Length: %d\r\nETag: \"v%d\"\r\n\r\n", from, to, total, length, total)
}
