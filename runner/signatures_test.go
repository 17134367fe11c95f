package runner

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/signing"
)

func signedRun(t *testing.T) (*manifest.Manifest, []byte, *signing.PrivateKey) {
	t.Helper()
	k, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	m := &manifest.Manifest{RunID: "20261120T010203Z-a1b2c3", Pipeline: "p", StartedAt: time.Unix(1, 0).UTC(), FinishedAt: time.Unix(2, 0).UTC(),
		Objects: []manifest.Object{{Stream: "a", Key: "a.zst", Size: 10, OriginalSize: 20, Digest: "sha256:" + strings.Repeat("ab", 32), Codec: "zstd"}}}
	b, err := encodeManifest(m, k)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := manifest.Parse(b)
	if err != nil || parsed.Signature == nil || parsed.Signature.Key != k.Fingerprint() {
		t.Fatalf("a signed manifest: %+v, %v", parsed, err)
	}
	return parsed, b, k
}

// A run's signed bytes give the run back; an untrusted one is refused with
// its id, its manifest and what to do.
func TestVerifiedManifest(t *testing.T) {
	m, raw, k := signedRun(t)
	got, signer, err := verifiedManifest(raw, signing.Trust{k.Public()})
	if err != nil || signer != k.Fingerprint() || got.RunID != m.RunID || got.Signature != nil || len(got.Objects) != 1 {
		t.Fatalf("verifiedManifest: %+v %s %v", got, signer, err)
	}
	other, _ := signing.Generate()
	_, signer, err = verifiedManifest(raw, signing.Trust{other.Public()})
	r := &catalog.Run{Key: "r1/pipe-manifest.json", Manifest: m}
	err = refused(r, err, signer, signing.Trust{other.Public()}, `pipeline "r"`)
	if !errors.Is(err, ErrUntrustedRun) {
		t.Fatalf("not ErrUntrustedRun: %v", err)
	}
	for _, want := range []string{"run " + m.RunID + " (manifest r1/pipe-manifest.json) is refused: it is signed by " + k.Fingerprint(), `pipeline "r" trusts only ` + other.Fingerprint(), "add its key to trust { keys } if you signed it"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v\nwant %q", err, want)
		}
	}
}

// A copy without sign keeps a signed run's manifest byte for byte when its
// objects are where the manifest says, and not otherwise.
func TestCopyAsIs(t *testing.T) {
	orig, raw, _ := signedRun(t)
	m := *orig
	m.CopiedAt = time.Now()
	if b := copyAsIs(m, orig, raw); !bytes.Equal(b, raw) {
		t.Fatal("an unchanged copy does not keep the signed bytes")
	}
	m.Objects = []manifest.Object{orig.Objects[0]}
	m.Objects[0].Key = "elsewhere/a.zst"
	if b := copyAsIs(m, orig, raw); b != nil {
		t.Fatal("a copy whose objects moved keeps the original signature")
	}
	unsigned, _ := orig.Marshal()
	if b := copyAsIs(*orig, orig, unsigned); b != nil {
		t.Fatal("an unsigned run's copy was kept as signed")
	}
	if b := copyAsIs(*orig, orig, nil); b != nil {
		t.Fatal("a copy without the original's bytes was kept as is")
	}
}
