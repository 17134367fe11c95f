package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"strings"
	"time"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/signing"
)

// A run's manifest may be signed (sign { key } in the pipeline that wrote
// it: see package signing). A pipeline with trust { keys } reads only runs
// one of its keys signed: it reads the chosen run's manifest again, as
// bytes, checks them, and reads the run as the bytes the signature covers
// say, never as a listing or the store's index did. Without trust nothing
// is checked, as before signatures, and a signed run is read with a
// notice that its signature is not checked.

// opener reads an object of a store.
type opener interface {
	Open(ctx context.Context, key string) (io.ReadCloser, error)
}

// ErrUntrustedRun is wrapped by the error of a run a pipeline with trust
// { keys } refuses.
var ErrUntrustedRun = errors.New("not signed by a trusted key")

// trustedRun reads the manifest of run r again from st and checks its
// signature against trust. It returns the run as its signed bytes say
// (r's manifest replaced), and the signer's fingerprint; a run that fails
// is an error that names it, its manifest and why, and says what to do
// (who names whoever trusts the keys).
func trustedRun(ctx context.Context, st opener, r *catalog.Run, trust signing.Trust, who string) (*catalog.Run, []byte, string, error) {
	_, raw, err := catalog.ReadManifestBytes(ctx, st, r.Key)
	if err != nil {
		return nil, nil, "", fmt.Errorf("run %s: reading its manifest %s again to check its signature: %w", r.Manifest.RunID, r.Key, err)
	}
	m, signer, err := verifiedManifest(raw, trust)
	if err != nil {
		return nil, nil, "", refused(r, err, signer, trust, who)
	}
	// The run was chosen by what the first read said (its pipeline, its
	// times, a base backup's positions): the signed bytes must say the
	// same, or the choice was made on bytes nobody signed.
	if m.RunID != r.Manifest.RunID || m.Pipeline != r.Manifest.Pipeline || !m.StartedAt.Equal(r.Manifest.StartedAt) ||
		!m.FinishedAt.Equal(r.Manifest.FinishedAt) || !maps.Equal(m.Source, r.Manifest.Source) {
		return nil, nil, "", fmt.Errorf("run %s: its manifest %s changed while it was read (it now holds run %s of pipeline %q, finished %s): manifests are written once; someone rewrote it", r.Manifest.RunID, r.Key, m.RunID, m.Pipeline, m.FinishedAt.UTC().Format(time.RFC3339))
	}
	return &catalog.Run{Key: r.Key, Manifest: m, Pinned: r.Pinned}, raw, signer, nil
}

// verifiedManifest checks raw, a manifest's bytes as stored, against
// trust and parses the bytes its signature covers.
func verifiedManifest(raw []byte, trust signing.Trust) (*manifest.Manifest, string, error) {
	unsigned, signer, err := signing.VerifyManifest(raw, trust)
	if err != nil {
		return nil, signer, err
	}
	m, err := manifest.Parse(unsigned)
	if err != nil {
		return nil, signer, err
	}
	return m, signer, nil
}

// refused is the error of run r, whose signature check failed with err
// (signer: the key its signature names, if it has one); who trusts the
// keys.
func refused(r *catalog.Run, err error, signer string, trust signing.Trust, who string) error {
	trusted := strings.Join(trust.Fingerprints(), ", ")
	var what string
	switch {
	case errors.Is(err, signing.ErrUnsigned):
		what = fmt.Sprintf("it is not signed (a pipeline without sign { key } wrote it, or someone else who can write the store did), and %s trusts only runs signed by %s. If you wrote it, check it before you restore it with a pipeline without trust { keys }", who, trusted)
	case errors.Is(err, signing.ErrUntrusted):
		what = fmt.Sprintf("it is signed by %s, and %s trusts only %s: add its key to trust { keys } if you signed it", signer, who, trusted)
	case errors.Is(err, signing.ErrForged):
		what = "its signature does not match its contents: the manifest was changed after it was signed, or the signature was made up; do not restore it"
	default:
		what = err.Error() + "; do not restore it"
	}
	return &untrustedRun{fmt.Sprintf("run %s (manifest %s) is refused: %s. To restore another run, choose it (run = \"…\" in the source, or --run)", r.Manifest.RunID, r.Key, what)}
}

// untrustedRun is the error of a run whose signature check failed.
type untrustedRun struct{ msg string }

func (e *untrustedRun) Error() string        { return e.msg }
func (e *untrustedRun) Is(target error) bool { return target == ErrUntrustedRun }

// checkSignature is what a run that reads run r through its manifest does
// with r's signature (see the top of this file): with trust, the run as
// its signed bytes say; without, a notice when r is signed. It returns
// the manifest's bytes when it read them again (with trust, or to copy a
// signed run as it is: copying).
func checkSignature(ctx context.Context, src *endpoint, r *catalog.Run, sp *streamsPlan, trust signing.Trust, who string, copying bool, warn func(string)) (*catalog.Run, error) {
	st := sourceStore{src: src.source}
	if trust != nil {
		tr, raw, signer, err := trustedRun(ctx, st, r, trust, who)
		if err != nil {
			return nil, err
		}
		sp.signer = signer
		if copying {
			sp.raw = raw
		}
		return tr, nil
	}
	if r.Manifest.Signature == nil {
		return r, nil
	}
	warn(fmt.Sprintf("run %s is signed (by %s), and %s has no trust block: its signature is not checked; add trust { keys = [file(\"keys/signing.pub\")] } to read only runs you signed", r.Manifest.RunID, r.Manifest.Signature.Key, who))
	if copying {
		m, raw, err := catalog.ReadManifestBytes(ctx, st, r.Key)
		if err != nil {
			return nil, fmt.Errorf("run %s: reading its manifest %s: %w", r.Manifest.RunID, r.Key, err)
		}
		if m.RunID != r.Manifest.RunID {
			return nil, fmt.Errorf("run %s: its manifest %s changed while it was read (it now holds run %s)", r.Manifest.RunID, r.Key, m.RunID)
		}
		r = &catalog.Run{Key: r.Key, Manifest: m, Pinned: r.Pinned}
		sp.raw = raw
	}
	return r, nil
}

// encodeManifest is a manifest's bytes as stored: signed with key, when
// set.
func encodeManifest(m *manifest.Manifest, key *signing.PrivateKey) ([]byte, error) {
	b, err := m.Marshal()
	if err != nil || key == nil {
		return b, err
	}
	return signing.SignManifest(key, b)
}

// copyAsIs returns the bytes of a copied run's manifest m when they can
// be the original's, byte for byte, signature and all: the original is
// signed (raw, its bytes as read) and m, with the original's copied_at,
// encodes to exactly what the signature covers (the copy put every object
// where the original says). Else nil.
func copyAsIs(m manifest.Manifest, orig *manifest.Manifest, raw []byte) []byte {
	if raw == nil {
		return nil
	}
	unsigned, _, err := signing.SplitManifest(raw)
	if err != nil {
		return nil
	}
	m.CopiedAt = orig.CopiedAt
	b, err := m.Marshal()
	if err != nil || !bytes.Equal(b, unsigned) {
		return nil
	}
	return raw
}
