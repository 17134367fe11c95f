package s3

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/plugins/storage/internal/objlock"
)

func TestLockConfig(t *testing.T) {
	for _, c := range []struct {
		cfg      objlock.Config
		checksum string
		err      string
		mode     types.ObjectLockMode
	}{
		{objlock.Config{Days: 0, Mode: "compliance"}, "crc32c", "", ""},
		{objlock.Config{Days: 35, Mode: "compliance"}, "crc32c", "", types.ObjectLockModeCompliance},
		{objlock.Config{Days: 7, Mode: "Governance"}, "sha256", "", types.ObjectLockModeGovernance},
		{objlock.Config{Days: 7, Mode: "forever"}, "crc32c", "unknown object lock mode", ""},
		{objlock.Config{Days: -1, Mode: "compliance"}, "crc32c", "invalid object lock", ""},
		{objlock.Config{Days: 7, Mode: "compliance"}, "none", "object lock needs a checksum", ""},
	} {
		d := checkLock(c.cfg, c.checksum)
		var mode types.ObjectLockMode
		var until *time.Time
		(&Sink{lk: c.cfg}).lock("r1/a.zst", &mode, &until)
		switch {
		case c.err == "" && d.HasErrors():
			t.Errorf("%+v: %v", c.cfg, d)
		case c.err != "" && (!d.HasErrors() || !strings.Contains(d[0].Summary, c.err)):
			t.Errorf("%+v: %v, want %q", c.cfg, d, c.err)
		case c.err == "" && mode != c.mode:
			t.Errorf("%+v: mode %q, want %q", c.cfg, mode, c.mode)
		}
	}
}

// The index and pins are never locked; everything else is, until the
// configured days from now.
func TestLockHeaders(t *testing.T) {
	s := &Sink{lk: objlock.Config{Days: 2, Mode: "compliance"}}
	for key, want := range map[string]bool{"base/r1/base.tar.zst": true, "base/r1/pipe-manifest.json": true,
		"archive/1/00000001/000000010000000000000001.claim": true, "base/pipe-index.json": false, "base/r1/pipe-manifest.json.pin": false} {
		var mode types.ObjectLockMode
		var until *time.Time
		s.lock(key, &mode, &until)
		if (mode != "") != want {
			t.Errorf("%s: mode %q, want locked %v", key, mode, want)
		}
		if want && (until == nil || time.Until(*until) < 47*time.Hour || time.Until(*until) > 49*time.Hour) {
			t.Errorf("%s: locked until %v, want two days from now", key, until)
		}
	}
}

// A key stands for the version pipe wrote (its oldest), whatever was
// written over it or marked deleted since; the index for its newest.
func TestChosenVersion(t *testing.T) {
	v := func(id string) types.ObjectVersion { return types.ObjectVersion{VersionId: aws.String(id)} }
	marker := types.DeleteMarkerEntry{IsLatest: aws.Bool(true), VersionId: aws.String("m")}
	k := &keyVersions{all: []types.ObjectVersion{v("attacker"), v("pipe")}, markers: []types.DeleteMarkerEntry{marker}}
	if got, ok := k.chosen("r1/a.zst"); !ok || *got.VersionId != "pipe" {
		t.Errorf("an object written over and deleted stands for %v %v, want pipe's version", got.VersionId, ok)
	}
	ix := &keyVersions{all: []types.ObjectVersion{v("new"), v("old")}}
	if got, ok := ix.chosen("pipe-index.json"); !ok || *got.VersionId != "new" {
		t.Errorf("the index stands for %v, want its newest", got.VersionId)
	}
	ix.markers = []types.DeleteMarkerEntry{marker}
	if _, ok := ix.chosen("pipe-index.json"); ok {
		t.Error("a deleted index still stands")
	}
	if _, ok := (&keyVersions{markers: []types.DeleteMarkerEntry{marker}}).chosen("r1/a.zst"); ok {
		t.Error("a key with only a delete marker stands for an object")
	}
}

// versionPages serves ListObjectVersions as S3 lists versions, by key,
// each key's newest first, four entries a page: a has pipe's version and
// an attacker's over it; b pipe's under a delete marker; c only a delete
// marker; d one version; and the index two.
func versionPages(t *testing.T) (*httptest.Server, *int) {
	t.Helper()
	type entry struct {
		key, id string
		marker  bool
	}
	entries := []entry{{"r/a", "attacker", false}, {"r/a", "pipe-a", false}, {"r/b", "mb", true}, {"r/b", "pipe-b", false},
		{"r/c", "mc", true}, {"r/d", "pipe-d", false}, {"r/pipe-index.json", "index-new", false}, {"r/pipe-index.json", "index-old", false}}
	var listings int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if !q.Has("versions") {
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.Error(w, "no", 400)
			return
		}
		listings++
		// After the marker: the entry it names, or every version of the
		// key it names.
		km, vm := q.Get("key-marker"), q.Get("version-id-marker")
		start := slices.IndexFunc(entries, func(e entry) bool { return e.key > km })
		if vm != "" {
			start = slices.IndexFunc(entries, func(e entry) bool { return e.key == km && e.id == vm }) + 1
		}
		if start < 0 {
			start = len(entries)
		}
		end := min(start+4, len(entries))
		var b strings.Builder
		fmt.Fprintf(&b, "<ListVersionsResult><IsTruncated>%v</IsTruncated>", end < len(entries))
		if end < len(entries) {
			fmt.Fprintf(&b, "<NextKeyMarker>%s</NextKeyMarker><NextVersionIdMarker>%s</NextVersionIdMarker>", entries[end-1].key, entries[end-1].id)
		}
		for i, e := range entries[start:end] {
			latest := start+i == 0 || entries[start+i-1].key != e.key
			if e.marker {
				fmt.Fprintf(&b, "<DeleteMarker><Key>%s</Key><VersionId>%s</VersionId><IsLatest>%v</IsLatest><LastModified>2026-11-29T00:00:00.000Z</LastModified></DeleteMarker>", e.key, e.id, latest)
			} else {
				fmt.Fprintf(&b, "<Version><Key>%s</Key><VersionId>%s</VersionId><IsLatest>%v</IsLatest><Size>%d</Size><LastModified>2026-11-29T00:00:00.000Z</LastModified></Version>", e.key, e.id, latest, len(e.id))
			}
		}
		b.WriteString("</ListVersionsResult>")
		w.Header().Set("Content-Type", "application/xml")
		fmt.Fprint(w, b.String())
	}))
	t.Cleanup(srv.Close)
	return srv, &listings
}

// In a versioned store each key stands for the version pipe wrote, its
// oldest, across pages; a key with only a delete marker is gone; the
// index stands for its newest.
func TestListChosen(t *testing.T) {
	srv, listings := versionPages(t)
	s, d := SinkType{}.Configure(context.Background(), sdk.NewConfig(map[string]any{"bucket": "b", "key": "r/", "endpoint": srv.URL, "path_style": true,
		"region": "us-east-1", "access_key_id": "AKIDFAKE", "secret_access_key": "fake-secret", "versioned": true, "retries": int64(0)}))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	st := s.(*Sink).st
	got, err := st.list(context.Background(), "r/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range got {
		keys = append(keys, o.Key)
	}
	if strings.Join(keys, " ") != "r/a r/b r/d r/pipe-index.json" {
		t.Errorf("listed %v", keys)
	}
	for key, want := range map[string]string{"r/a": "pipe-a", "r/b": "pipe-b", "r/d": "pipe-d"} {
		if id, err := st.version(context.Background(), key); err != nil || id != want {
			t.Errorf("%s reads version %q (%v), want %q", key, id, err, want)
		}
	}
	if id, _ := st.version(context.Background(), "r/pipe-index.json"); id != "" {
		t.Errorf("the index reads version %q, want its newest (no id)", id)
	}
	if *listings != 2 {
		t.Errorf("%d listings for the whole prefix, want 2 pages (reads use the versions listed)", *listings)
	}
	// Keys after r/a, at most one: b (its delete marker skipped over),
	// then, after b, d (c has only a delete marker).
	for after, want := range map[string]string{"r/a": "r/b", "r/b": "r/d"} {
		got, err := st.listChosen(context.Background(), "r/", after, 1)
		if err != nil || len(got) != 1 || got[0].Key != want {
			t.Errorf("one key after %s: %v %v, want %s", after, got, err, want)
		}
	}
}
