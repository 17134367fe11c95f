package signing

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unsignedManifest is a manifest as manifest.Marshal writes it.
func unsignedManifest(t *testing.T) []byte {
	t.Helper()
	b, err := json.MarshalIndent(map[string]any{"format": "pipe-manifest/v1", "run_id": "20261120T010203Z-a1b2c3",
		"objects": []map[string]any{{"stream": "a", "key": "a.zst", "digest": "sha256:00"}}}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func newKey(t *testing.T) *PrivateKey {
	t.Helper()
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Keys survive their PEM files, and the fingerprint is the SHA-256 of the
// raw public key.
func TestKeysRoundTrip(t *testing.T) {
	k := newKey(t)
	pemKey, err := k.PEM()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(pemKey, []byte("-----BEGIN PRIVATE KEY-----\n")) {
		t.Fatalf("private key PEM:\n%s", pemKey)
	}
	k2, err := ParsePrivateKey(pemKey)
	if err != nil {
		t.Fatal(err)
	}
	if k2.Fingerprint() != k.Fingerprint() || !strings.HasPrefix(k.Fingerprint(), "ed25519:") || len(k.Fingerprint()) != len("ed25519:")+64 {
		t.Fatalf("fingerprints %s, %s", k.Fingerprint(), k2.Fingerprint())
	}
	pub := k.Public().PEM()
	if !bytes.HasPrefix(pub, []byte("-----BEGIN PUBLIC KEY-----\n")) {
		t.Fatalf("public key PEM:\n%s", pub)
	}
	keys, err := ParsePublicKeys(pub)
	if err != nil || len(keys) != 1 || keys[0].Fingerprint() != k.Fingerprint() {
		t.Fatalf("ParsePublicKeys: %v %v", keys, err)
	}
	// Two keys in one file, and one given twice, count as two.
	other := newKey(t)
	tr, err := ParseTrust([]string{string(pub) + string(other.Public().PEM()), string(pub)})
	if err != nil || len(tr) != 2 {
		t.Fatalf("ParseTrust: %d keys, %v", len(tr), err)
	}
	sig := k.Sign("d\n", []byte("msg"))
	if got, ok := tr.Verify("d\n", []byte("msg"), sig); !ok || got.Fingerprint() != k.Fingerprint() {
		t.Fatal("a trusted key's signature does not verify")
	}
	if _, ok := tr.Verify("other\n", []byte("msg"), sig); ok {
		t.Fatal("a signature passed for another domain")
	}
	if _, ok := tr.Verify("d\n", []byte("msh"), sig); ok {
		t.Fatal("a signature passed for another message")
	}
	if _, ok := (Trust{other.Public()}).Verify("d\n", []byte("msg"), sig); ok {
		t.Fatal("a signature passed for another key")
	}
}

// The wrong file in a key's place is refused with what it is, and the
// error never quotes the file.
func TestParseRefuses(t *testing.T) {
	k := newKey(t)
	priv, _ := k.PEM()
	pub := k.Public().PEM()
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecPriv := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})
	ecPubDER, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	ecPub := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: ecPubDER})
	const ageKey = "# created: 2026-11-20T01:02:03Z\n# public key: age1qyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqs3290gq\nAGE-SECRET-KEY-1QYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSZQGPQYQSEQWQ3KR\n"
	const ageRecipient = "age1qyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqszqgpqyqs3290gq\n"
	for name, tc := range map[string]struct {
		text    string
		private bool
		want    string
	}{
		"age identity as private": {ageKey, true, "not a PEM ed25519 private key (-----BEGIN PRIVATE KEY-----): this is an age identity"},
		"age recipient as public": {ageRecipient, false, "not a PEM ed25519 public key (-----BEGIN PUBLIC KEY-----): this is an age recipient"},
		"age identity as public":  {ageKey, false, "this is an age identity"},
		"public as private":       {string(pub), true, "a public key, where the private key is needed"},
		"private as public":       {string(priv), false, "a private key, where a public key is expected"},
		"empty":                   {"", true, "the file is empty"},
		"garbage":                 {"hello\n", true, "not a PEM ed25519 private key"},
		"ecdsa private":           {string(ecPriv), true, "a private key of another kind (ECDSA), not ed25519"},
		"ecdsa public":            {string(ecPub), false, "a public key of another kind (ECDSA), not ed25519"},
		"two private keys":        {string(priv) + string(priv), true, "2 PEM blocks"},
		"encrypted":               {"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n", true, "an encrypted private key"},
		"damaged":                 {"-----BEGIN PRIVATE KEY-----\n!!!\n-----END PRIVATE KEY-----\n", true, "a damaged PEM block"},
		"bad der":                 {"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", true, "not a valid PKCS#8 private key"},
	} {
		var err error
		if tc.private {
			_, err = ParsePrivateKey([]byte(tc.text))
		} else {
			_, err = ParseTrust([]string{tc.text})
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", name, err, tc.want)
			continue
		}
		for _, line := range strings.Split(tc.text, "\n") {
			if len(line) > 20 && !strings.HasPrefix(line, "-----") && strings.Contains(err.Error(), line) {
				t.Errorf("%s: the error quotes the file: %v", name, err)
			}
		}
	}
}

// A signed manifest is the unsigned bytes with one member, last, on one
// line; it verifies, and its unsigned bytes come back exactly.
func TestManifestRoundTrip(t *testing.T) {
	k := newKey(t)
	unsigned := unsignedManifest(t)
	signed, err := SignManifest(k, unsigned)
	if err != nil {
		t.Fatal(err)
	}
	head := unsigned[:len(unsigned)-3]
	if !bytes.HasPrefix(signed, head) {
		t.Fatal("the signed manifest does not start with the unsigned one's bytes")
	}
	tail := string(signed[len(head):])
	if !strings.HasPrefix(tail, ",\n  \"signature\": {\"key\": \""+k.Fingerprint()+"\", \"ed25519\": \"") || !strings.HasSuffix(tail, "\"}\n}\n") || strings.Count(tail, "\n") != 3 || len(tail) != TrailerLen() {
		t.Fatalf("trailer %q", tail)
	}
	var doc map[string]any
	if err := json.Unmarshal(signed, &doc); err != nil {
		t.Fatalf("the signed manifest is not JSON: %v", err)
	}
	got, signer, err := VerifyManifest(signed, Trust{newKey(t).Public(), k.Public()})
	if err != nil || signer != k.Fingerprint() || !bytes.Equal(got, unsigned) {
		t.Fatalf("VerifyManifest: %v, signer %s, bytes equal %v", err, signer, bytes.Equal(got, unsigned))
	}
	if _, err := SignManifest(k, signed); err == nil {
		t.Error("a signed manifest was signed again")
	}
}

// Any byte changed fails the check; so does another key, and no trust.
func TestManifestTampered(t *testing.T) {
	k := newKey(t)
	signed, err := SignManifest(k, unsignedManifest(t))
	if err != nil {
		t.Fatal(err)
	}
	trust := Trust{k.Public()}
	for i := range signed {
		b := bytes.Clone(signed)
		b[i] ^= 0x01
		if _, _, err := VerifyManifest(b, trust); err == nil {
			t.Fatalf("byte %d (%q) changed, and the manifest still verifies", i, signed[i])
		}
	}
	other := newKey(t)
	if _, signer, err := VerifyManifest(signed, Trust{other.Public()}); !errors.Is(err, ErrUntrusted) || signer != k.Fingerprint() || !strings.Contains(err.Error(), k.Fingerprint()) {
		t.Errorf("another key: %v (signer %s)", err, signer)
	}
	if _, _, err := VerifyManifest(signed, nil); !errors.Is(err, ErrUntrusted) {
		t.Errorf("no trust: %v", err)
	}
	// A signature of other bytes, under the trusted key's name.
	bySomeoneElse, _ := SignManifest(other, unsignedManifest(t))
	forged := append(bytes.Clone(bySomeoneElse[:len(bySomeoneElse)-TrailerLen()]), signed[len(signed)-TrailerLen():]...)
	forged = bytes.Replace(forged, []byte("a.zst"), []byte("b.zst"), 1)
	if _, _, err := VerifyManifest(forged, trust); !errors.Is(err, ErrForged) {
		t.Errorf("changed contents: %v", err)
	}
	if _, _, err := VerifyManifest(unsignedManifest(t), trust); !errors.Is(err, ErrUnsigned) {
		t.Errorf("unsigned: %v", err)
	}
}

// Only the exact trailer passes: a signature member elsewhere, twice, on
// other lines, or bytes after the closing brace are refused.
func TestManifestTrailerVariations(t *testing.T) {
	k := newKey(t)
	unsigned := unsignedManifest(t)
	signed, _ := SignManifest(k, unsigned)
	trust := Trust{k.Public()}
	tr := string(signed[len(signed)-TrailerLen():])
	member := strings.TrimSuffix(strings.TrimPrefix(tr, ",\n  "), "\n}\n") // "signature": {…}
	head := string(unsigned[:len(unsigned)-3])
	for name, tc := range map[string]struct {
		raw  string
		want error
	}{
		"trailing newline":   {string(signed) + "\n", ErrMalformed},
		"trailing space":     {string(signed) + " ", ErrMalformed},
		"no final newline":   {strings.TrimSuffix(string(signed), "\n"), ErrMalformed},
		"CRLF":               {strings.ReplaceAll(string(signed), "\n", "\r\n"), ErrMalformed},
		"not last":           {"{\n  " + member + ",\n" + strings.TrimPrefix(string(unsigned), "{\n"), ErrMalformed},
		"two lines":          {head + ",\n  " + strings.Replace(member, "{", "{\n", 1) + "\n}\n", ErrMalformed},
		"second signature":   {"{\n  " + member + ",\n" + strings.TrimPrefix(string(signed), "{\n"), ErrMalformed},
		"compact":            {head + "," + strings.ReplaceAll(member, " ", "") + "\n}\n", ErrMalformed},
		"no padding":         {strings.Replace(string(signed), "==\"}", "\"}", 1), ErrMalformed},
		"uppercase key":      {strings.Replace(string(signed), k.Fingerprint(), strings.ToUpper(k.Fingerprint()), 1), ErrMalformed},
		"unsigned":           {string(unsigned), ErrUnsigned},
		"signature is null":  {head + ",\n  \"signature\": null\n}\n", ErrMalformed},
		"not json at all":    {"nope", ErrUnsigned},
		"signed, empty head": {tr[1:], ErrUnsigned},
	} {
		if _, _, err := VerifyManifest([]byte(tc.raw), trust); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
	// A signature whose base64 has bits set past the 64 bytes.
	sig := tr[strings.Index(tr, `"ed25519": "`)+12:][:88]
	last := strings.IndexByte("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/", sig[85])
	bent := sig[:85] + string("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"[last|1]) + "=="
	if _, _, err := VerifyManifest([]byte(strings.Replace(string(signed), sig, bent, 1)), trust); !errors.Is(err, ErrMalformed) {
		t.Errorf("non-canonical base64: %v", err)
	}
	if _, err := base64.StdEncoding.DecodeString(sig); err != nil {
		t.Fatal(err)
	}
}

// openssl checks keys and signatures without pipe, as docs/security.md
// shows.
func TestOpenSSL(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	dir := t.TempDir()
	k := newKey(t)
	priv, _ := k.PEM()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyPath, pubPath := write("signing.key", priv), write("signing.pub", k.Public().PEM())
	out, err := exec.Command(openssl, "pkey", "-in", keyPath, "-pubout").CombinedOutput()
	if err != nil || !bytes.Equal(out, k.Public().PEM()) {
		t.Fatalf("openssl pkey -pubout: %v\n%s", err, out)
	}
	unsigned := unsignedManifest(t)
	signed, _ := SignManifest(k, unsigned)
	// By hand: cut the trailer, close the object, put the domain first.
	msg := append([]byte(ManifestDomain), signed[:len(signed)-TrailerLen()]...)
	msg = append(msg, "\n}\n"...)
	tr := string(signed[len(signed)-TrailerLen():])
	sig, err := base64.StdEncoding.DecodeString(tr[strings.Index(tr, `"ed25519": "`)+12:][:88])
	if err != nil {
		t.Fatal(err)
	}
	msgPath, sigPath := write("message", msg), write("sig", sig)
	out, err = exec.Command(openssl, "pkeyutl", "-verify", "-pubin", "-inkey", pubPath, "-rawin", "-in", msgPath, "-sigfile", sigPath).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Signature Verified Successfully") {
		t.Fatalf("openssl pkeyutl -verify: %v\n%s", err, out)
	}
	msg[len(ManifestDomain)+5] ^= 1
	write("message", msg)
	if out, err := exec.Command(openssl, "pkeyutl", "-verify", "-pubin", "-inkey", pubPath, "-rawin", "-in", msgPath, "-sigfile", sigPath).CombinedOutput(); err == nil {
		t.Fatalf("openssl verified a changed message:\n%s", out)
	}
	// And a key openssl made signs what pipe verifies.
	genPath := filepath.Join(dir, "openssl.key")
	if out, err := exec.Command(openssl, "genpkey", "-algorithm", "ed25519", "-out", genPath).CombinedOutput(); err != nil {
		t.Fatalf("openssl genpkey: %v\n%s", err, out)
	}
	gen, _ := os.ReadFile(genPath)
	gk, err := ParsePrivateKey(gen)
	if err != nil {
		t.Fatalf("a key openssl made: %v", err)
	}
	msg = append([]byte(ManifestDomain), unsigned...)
	write("message", msg)
	sigOut := filepath.Join(dir, "sig2")
	if out, err := exec.Command(openssl, "pkeyutl", "-sign", "-inkey", genPath, "-rawin", "-in", msgPath, "-out", sigOut).CombinedOutput(); err != nil {
		t.Fatalf("openssl pkeyutl -sign: %v\n%s", err, out)
	}
	s2, _ := os.ReadFile(sigOut)
	if !gk.Public().Verify(ManifestDomain, unsigned, s2) {
		t.Fatal("pipe does not verify openssl's signature")
	}
}

// docs/security.md's check by hand cuts the last 206 bytes.
func TestTrailerLenDocumented(t *testing.T) {
	if TrailerLen() != 206 {
		t.Fatalf("the trailer is %d bytes: docs/security.md says 206", TrailerLen())
	}
}
