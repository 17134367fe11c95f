package manifest

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	m := &Manifest{RunID: "r1", Pipeline: "p", StartedAt: time.Unix(1, 0).UTC(), FinishedAt: time.Unix(2, 0).UTC(),
		Objects: []Object{{Stream: "a/b.csv", Key: "a/b.csv.zst", Size: 10, OriginalSize: 20, Digest: "sha256:00", Codec: "zstd"}}}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("%+v", got)
	}
}

func TestParseRejects(t *testing.T) {
	for name, tc := range map[string]struct{ json, want string }{
		"garbage":   {`nope`, "not a pipe manifest"},
		"no format": {`{"run_id":"x"}`, "no format field"},
		"newer":     {`{"format":"pipe-manifest/v9","run_id":"x"}`, "upgrade pipe"},
		"escape":    {`{"format":"pipe-manifest/v1","run_id":"x","objects":[{"stream":"../../etc/passwd","key":"k"}]}`, "not a relative path"},
		"absolute":  {`{"format":"pipe-manifest/v1","run_id":"x","objects":[{"stream":"/etc/passwd","key":"k"}]}`, "not a relative path"},
		"dup":       {`{"format":"pipe-manifest/v1","run_id":"x","objects":[{"stream":"a","key":"k"},{"stream":"a","key":"j"}]}`, "twice"},
		"abs key":   {`{"format":"pipe-manifest/v1","run_id":"x","objects":[{"stream":"a","key":"/k"}]}`, "relative to the manifest"},
	} {
		if _, err := Parse([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}

func TestRelResolve(t *testing.T) {
	for _, tc := range []struct{ manifest, key, rel string }{
		{"backups/run1/pipe-manifest.json", "backups/run1/a/b.zst", "a/b.zst"},
		{"pipe-manifest.json", "a.zst", "a.zst"},
		{"backups/pipe-manifest/r1.json", "backups/users/r1.zst", "../users/r1.zst"},
		{"x/db.dump.zst.pipe-manifest.json", "x/db.dump.zst", "db.dump.zst"},
	} {
		if got := Rel(tc.manifest, tc.key); got != tc.rel {
			t.Errorf("Rel(%s, %s) = %s, want %s", tc.manifest, tc.key, got, tc.rel)
		}
		if got := Resolve(tc.manifest, tc.rel); got != tc.key {
			t.Errorf("Resolve(%s, %s) = %s, want %s", tc.manifest, tc.rel, got, tc.key)
		}
	}
}
