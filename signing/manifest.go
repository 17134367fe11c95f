package signing

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// ManifestDomain comes before a manifest's bytes in what its signature
// covers.
const ManifestDomain = "pipe-manifest-signature/v1\n"

// WALObjectDomain comes before a WAL object's key (without its signature)
// in what the signature in its name covers.
const WALObjectDomain = "pipe-wal-object-signature/v1\n"

// The ways a manifest fails verification (VerifyManifest wraps them).
var (
	// ErrUnsigned: the manifest has no signature.
	ErrUnsigned = errors.New("it is not signed")
	// ErrUntrusted: it is signed by a key trust does not hold.
	ErrUntrusted = errors.New("it is signed by a key that is not trusted")
	// ErrForged: the signature does not match the bytes (they were
	// changed after signing, or the signature was made up).
	ErrForged = errors.New("its signature does not match its contents")
	// ErrMalformed: a signature member pipe never writes (not last, not
	// on one line as pipe writes it, or two of them).
	ErrMalformed = errors.New("its signature is not in the form pipe writes")
)

// unsignedEnd is how every manifest pipe writes ends: the top-level
// object's closing brace on a line of its own.
const unsignedEnd = "\n}\n"

// trailerRE is the signature member as SignManifest writes it, with the
// closing brace, at the very end of a manifest.
var trailerRE = regexp.MustCompile(`^,\n  "signature": \{"key": "(ed25519:[0-9a-f]{64})", "ed25519": "([A-Za-z0-9+/]{86}==)"\}\n\}\n$`)

// trailerLen is the length of the trailer: its hex and base64 have fixed
// lengths.
var trailerLen = len(trailer(strings.Repeat("0", 64), make([]byte, 64)))

// TrailerLen is how many bytes the signature member and the closing brace
// take at the end of a signed manifest: those that a check by hand cuts off
// (see docs/security.md).
func TrailerLen() int { return trailerLen }

func trailer(fpHex string, sig []byte) string {
	return fmt.Sprintf(",\n  \"signature\": {\"key\": \"ed25519:%s\", \"ed25519\": \"%s\"}\n}\n", fpHex, base64.StdEncoding.EncodeToString(sig))
}

// SignManifest signs a manifest's bytes as manifest.Marshal writes them
// (a JSON object ending in "\n}\n", without a signature member) and
// returns the signed manifest: those bytes with the signature member
// added, last, on one line.
func SignManifest(k *PrivateKey, unsigned []byte) ([]byte, error) {
	if !bytes.HasPrefix(unsigned, []byte("{")) || !bytes.HasSuffix(unsigned, []byte(unsignedEnd)) {
		return nil, errors.New("signing a manifest: not a manifest as pipe writes it")
	}
	if hasMember(unsigned, "signature") {
		return nil, errors.New("signing a manifest: it is signed already")
	}
	sig := k.Sign(ManifestDomain, unsigned)
	out := make([]byte, 0, len(unsigned)+trailerLen)
	out = append(out, unsigned[:len(unsigned)-len(unsignedEnd)]...)
	return append(out, trailer(strings.TrimPrefix(k.Fingerprint(), "ed25519:"), sig)...), nil
}

// ManifestSignature is the signature a manifest's bytes end with.
type ManifestSignature struct {
	// Key is the fingerprint of the key that signed it.
	Key string
	Sig []byte
}

// SplitManifest cuts a signed manifest's bytes, as read from a store,
// into the unsigned bytes its signature covers and the signature. A
// manifest without a signature member is ErrUnsigned; one whose signature
// member is not the trailer SignManifest writes, exactly, is ErrMalformed.
func SplitManifest(raw []byte) (unsigned []byte, sig ManifestSignature, err error) {
	if len(raw) >= trailerLen {
		if m := trailerRE.FindSubmatch(raw[len(raw)-trailerLen:]); m != nil {
			s, derr := base64.StdEncoding.Strict().DecodeString(string(m[2]))
			if derr != nil {
				return nil, sig, fmt.Errorf("%w: the signature is not base64", ErrMalformed)
			}
			unsigned = make([]byte, 0, len(raw)-trailerLen+len(unsignedEnd))
			unsigned = append(unsigned, raw[:len(raw)-trailerLen]...)
			unsigned = append(unsigned, unsignedEnd...)
			if hasMember(unsigned, "signature") {
				return nil, sig, fmt.Errorf("%w: it holds a second signature member", ErrMalformed)
			}
			return unsigned, ManifestSignature{Key: string(m[1]), Sig: s}, nil
		}
	}
	if hasMember(raw, "signature") {
		return nil, sig, fmt.Errorf("%w: the signature member must be the last, on one line, as pipe writes it, with nothing after the closing brace", ErrMalformed)
	}
	return nil, sig, ErrUnsigned
}

// VerifyManifest checks the signature of a manifest's bytes as read from a
// store against the trusted keys. It returns the unsigned bytes, which
// are what the signature covers (parse those), and the fingerprint of the
// key that signed them. Its errors wrap ErrUnsigned, ErrUntrusted,
// ErrForged or ErrMalformed.
func VerifyManifest(raw []byte, trust Trust) (unsigned []byte, signer string, err error) {
	unsigned, sig, err := SplitManifest(raw)
	if err != nil {
		return nil, "", err
	}
	k, ok := trust.Key(sig.Key)
	if !ok {
		return nil, sig.Key, fmt.Errorf("%w: %s", ErrUntrusted, sig.Key)
	}
	if !k.Verify(ManifestDomain, unsigned, sig.Sig) {
		return nil, sig.Key, fmt.Errorf("%w (it names the key %s)", ErrForged, sig.Key)
	}
	return unsigned, sig.Key, nil
}

// hasMember reports whether the JSON object b has a top-level member
// called name (false for anything that is not a JSON object).
func hasMember(b []byte, name string) bool {
	dec := json.NewDecoder(bytes.NewReader(b))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return false
		}
		if k, ok := t.(string); ok && k == name {
			return true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false
		}
	}
	return false
}
