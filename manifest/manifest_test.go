package manifest

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

const digestA = "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"

func valid() *Manifest {
	return &Manifest{Format: Format, RunID: "20261120T010203Z-a1b2c3", Pipeline: "p", StartedAt: time.Unix(1, 0).UTC(), FinishedAt: time.Unix(2, 0).UTC(),
		Objects: []Object{{Stream: "a/b.csv", Key: "a/b.csv.zst", Size: 10, OriginalSize: 20, Digest: digestA, Codec: "zstd"}}}
}

func TestRoundTrip(t *testing.T) {
	m := valid()
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

// A partial run (a cluster's database failed) keeps what failed, and why.
func TestPartial(t *testing.T) {
	m := valid()
	m.Failed = []Failed{{Stream: "billing.dump", Error: `pg_dump: error: permission denied for database "billing"`}}
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Partial() || !reflect.DeepEqual(got.Failed, m.Failed) {
		t.Fatalf("failed %+v, want %+v", got.Failed, m.Failed)
	}
	if valid().Partial() {
		t.Error("a run without failed streams is partial")
	}
}

func TestParseRejects(t *testing.T) {
	for name, tc := range map[string]struct{ json, want string }{
		"garbage":   {`nope`, "not a pipe manifest"},
		"no format": {`{"run_id":"x"}`, "no format field"},
		"newer":     {`{"format":"pipe-manifest/v9","run_id":"x"}`, "upgrade pipe"},
	} {
		if _, err := Parse([]byte(tc.json)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
	// Each case breaks one field of a valid manifest.
	for name, tc := range map[string]struct {
		edit func(m *Manifest)
		want string
	}{
		"no run id":        {func(m *Manifest) { m.RunID = "" }, "no run_id"},
		"run id escapes":   {func(m *Manifest) { m.RunID = "../x" }, "not one pipe writes"},
		"run id dots":      {func(m *Manifest) { m.RunID = "a..b" }, "not one pipe writes"},
		"run id slash":     {func(m *Manifest) { m.RunID = "a/b" }, "not one pipe writes"},
		"run id newline":   {func(m *Manifest) { m.RunID = "a\nb" }, "not one pipe writes"},
		"run id NUL":       {func(m *Manifest) { m.RunID = "a\x00b" }, "not one pipe writes"},
		"pipeline":         {func(m *Manifest) { m.Pipeline = "a b" }, "not a pipeline name"},
		"no times":         {func(m *Manifest) { m.StartedAt = time.Time{} }, "no started_at"},
		"time order":       {func(m *Manifest) { m.FinishedAt = m.StartedAt.Add(-time.Second) }, "before started_at"},
		"frame":            {func(m *Manifest) { m.FrameSize = 1 << 40 }, "frame_size"},
		"no objects":       {func(m *Manifest) { m.Objects = nil }, "no objects"},
		"empty objects":    {func(m *Manifest) { m.Objects = []Object{} }, "no objects"},
		"escape":           {func(m *Manifest) { m.Objects[0].Stream = "../../etc/passwd" }, `".."`},
		"absolute":         {func(m *Manifest) { m.Objects[0].Stream = "/etc/passwd" }, "absolute"},
		"stream NUL":       {func(m *Manifest) { m.Objects[0].Stream = "a\x00b" }, "control character"},
		"stream newline":   {func(m *Manifest) { m.Objects[0].Stream = "a\nb" }, "control character"},
		"dup":              {func(m *Manifest) { m.Objects = append(m.Objects, m.Objects[0]) }, "twice"},
		"abs key":          {func(m *Manifest) { m.Objects[0].Key = "/k" }, "relative to the manifest"},
		"empty key":        {func(m *Manifest) { m.Objects[0].Key = "" }, "relative to the manifest"},
		"key newline":      {func(m *Manifest) { m.Objects[0].Key = "a\nb" }, "control character"},
		"negative size":    {func(m *Manifest) { m.Objects[0].Size = -1 }, "negative size"},
		"no digest":        {func(m *Manifest) { m.Objects[0].Digest = "" }, "no digest"},
		"short digest":     {func(m *Manifest) { m.Objects[0].Digest = "sha256:00" }, "64 hex digits"},
		"md5 digest":       {func(m *Manifest) { m.Objects[0].Digest = "md5:" + strings.Repeat("0", 32) }, "64 hex digits"},
		"long digest":      {func(m *Manifest) { m.Objects[0].Digest = digestA + "0" }, "64 hex digits"},
		"upper digest":     {func(m *Manifest) { m.Objects[0].Digest = strings.ToUpper(digestA) }, "64 hex digits"},
		"long run id":      {func(m *Manifest) { m.RunID = strings.Repeat("r", 129) }, "run_id"},
		"long pipeline":    {func(m *Manifest) { m.Pipeline = strings.Repeat("p", 129) }, "not a pipeline name"},
		"codec":            {func(m *Manifest) { m.Objects[0].Codec = "brotli" }, "codec"},
		"no codec":         {func(m *Manifest) { m.Objects[0].Codec = "" }, "codec"},
		"encryption":       {func(m *Manifest) { m.Objects[0].Encryption = "rot13" }, "not age"},
		"no recipients":    {func(m *Manifest) { m.Objects[0].Encryption = "age" }, "no recipient"},
		"stray recipients": {func(m *Manifest) { m.Objects[0].Recipients = []string{"x"} }, "no encryption"},
		"fact newline":     {func(m *Manifest) { m.Source = map[string]string{"db": "a\nb"} }, "control character"},
		"failed escapes":   {func(m *Manifest) { m.Failed = []Failed{{Stream: "../x.dump", Error: "e"}} }, `".."`},
		"failed twice":     {func(m *Manifest) { m.Failed = []Failed{{Stream: "a/b.csv", Error: "e"}} }, "both stored and failed"},
		"failed newline":   {func(m *Manifest) { m.Failed = []Failed{{Stream: "x.dump", Error: "a\nb"}} }, "control character"},
		"failed long":      {func(m *Manifest) { m.Failed = []Failed{{Stream: "x.dump", Error: strings.Repeat("e", MaxErrorLen+1)}} }, "at most"},
	} {
		m := valid()
		tc.edit(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Parse(b); err == nil || !strings.Contains(err.Error(), tc.want) {
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

// TestLongestNames: the longest run id and pipeline name a manifest may
// hold pass (TestParseRejects refuses one byte more).
func TestLongestNames(t *testing.T) {
	m := valid()
	m.RunID, m.Pipeline = strings.Repeat("r", 128), strings.Repeat("p", 128)
	b, err := m.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(b); err != nil {
		t.Fatal(err)
	}
}

// A signed manifest parses, with its signature member (old, unsigned ones
// still do: see TestRoundTrip); Marshal writes the unsigned bytes a
// signature covers; a signature member pipe never writes is refused.
func TestSigned(t *testing.T) {
	b, err := valid().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	key := "ed25519:" + strings.Repeat("ab", 32)
	sig := strings.Repeat("A", 86) + "=="
	signed := string(b[:len(b)-3]) + ",\n  \"signature\": {\"key\": \"" + key + "\", \"ed25519\": \"" + sig + "\"}\n}\n"
	m, err := Parse([]byte(signed))
	if err != nil {
		t.Fatal(err)
	}
	if m.Signature == nil || m.Signature.Key != key || m.Signature.Ed25519 != sig {
		t.Fatalf("signature %+v", m.Signature)
	}
	again, err := m.Marshal()
	if err != nil || string(again) != string(b) {
		t.Fatalf("Marshal of a signed manifest:\n%s\nwant the unsigned bytes:\n%s", again, b)
	}
	if m.Signature == nil {
		t.Fatal("Marshal dropped the manifest's own signature")
	}
	for name, tc := range map[string]struct{ from, to, want string }{
		"key not ed25519": {key, "rsa:" + strings.Repeat("ab", 32), "is not ed25519:<64 hex digits>"},
		"key short":       {key, key[:70], "is not ed25519:<64 hex digits>"},
		"signature short": {sig, sig[2:], "not the base64 of a 64-byte signature"},
		"control char":    {key, "ed25519:\\n" + strings.Repeat("ab", 31), "is not ed25519"},
	} {
		if _, err := Parse([]byte(strings.Replace(signed, tc.from, tc.to, 1))); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
		}
	}
}
