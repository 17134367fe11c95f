package signing

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// PrivateKey is a signing key: what a backup writer holds.
type PrivateKey struct {
	key ed25519.PrivateKey
	pub PublicKey
}

// PublicKey is a key a restore trusts.
type PublicKey struct {
	key ed25519.PublicKey
	fp  string
}

// Generate makes a new signing key.
func Generate() (*PrivateKey, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return newPrivate(priv), nil
}

func newPrivate(priv ed25519.PrivateKey) *PrivateKey {
	return &PrivateKey{key: priv, pub: newPublic(priv.Public().(ed25519.PublicKey))}
}

func newPublic(pub ed25519.PublicKey) PublicKey {
	return PublicKey{key: pub, fp: Fingerprint(pub)}
}

// Fingerprint names a public key without being it: "ed25519:" and the
// hex SHA-256 of the raw 32-byte key.
func Fingerprint(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(sum[:])
}

// Public is the key's public half.
func (k *PrivateKey) Public() PublicKey { return k.pub }

// Fingerprint is the fingerprint of the key's public half.
func (k *PrivateKey) Fingerprint() string { return k.pub.fp }

// PEM is the key as a PKCS#8 PEM block, "-----BEGIN PRIVATE KEY-----".
func (k *PrivateKey) PEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(k.key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// Sign signs domain followed by msg.
func (k *PrivateKey) Sign(domain string, msg []byte) []byte {
	return ed25519.Sign(k.key, message(domain, msg))
}

// Fingerprint names the key.
func (p PublicKey) Fingerprint() string { return p.fp }

// PEM is the key as a PKIX PEM block, "-----BEGIN PUBLIC KEY-----".
func (p PublicKey) PEM() []byte {
	der, err := x509.MarshalPKIXPublicKey(p.key)
	if err != nil {
		panic(err) // an ed25519 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// Verify reports whether sig is the key's signature of domain followed by
// msg.
func (p PublicKey) Verify(domain string, msg, sig []byte) bool {
	return len(sig) == ed25519.SignatureSize && ed25519.Verify(p.key, message(domain, msg), sig)
}

func message(domain string, msg []byte) []byte {
	return append([]byte(domain), msg...)
}

// Trust is the public keys whose signatures a restore accepts; empty, it
// accepts none.
type Trust []PublicKey

// Fingerprints names the keys.
func (t Trust) Fingerprints() []string {
	out := make([]string, 0, len(t))
	for _, k := range t {
		out = append(out, k.fp)
	}
	return out
}

// Key returns the trusted key with fingerprint fp.
func (t Trust) Key(fp string) (PublicKey, bool) {
	for _, k := range t {
		if k.fp == fp {
			return k, true
		}
	}
	return PublicKey{}, false
}

// Verify returns the trusted key whose signature of domain and msg sig
// is, if one's is.
func (t Trust) Verify(domain string, msg, sig []byte) (PublicKey, bool) {
	if len(sig) != ed25519.SignatureSize {
		return PublicKey{}, false
	}
	m := message(domain, msg)
	for _, k := range t {
		if ed25519.Verify(k.key, m, sig) {
			return k, true
		}
	}
	return PublicKey{}, false
}

// keygenHint ends the errors of a key that is not one: how to make one.
const keygenHint = "`pipe keygen --signing` makes a key pair (keys/signing.key and keys/signing.pub)"

// ParsePrivateKey reads a signing key from the contents of its file: one
// PKCS#8 PEM block of an ed25519 key, "-----BEGIN PRIVATE KEY-----". Its
// errors never quote the file.
func ParsePrivateKey(text []byte) (*PrivateKey, error) {
	blocks, err := pemBlocks(text)
	if err != nil {
		return nil, err
	}
	switch {
	case len(blocks) == 0:
		return nil, errors.New("not a PEM ed25519 private key (-----BEGIN PRIVATE KEY-----): " + notPEM(text) + keygenHint)
	case len(blocks) > 1:
		return nil, fmt.Errorf("%d PEM blocks: a signing key file holds one private key", len(blocks))
	}
	b := blocks[0]
	switch b.Type {
	case "PRIVATE KEY":
	case "PUBLIC KEY":
		return nil, errors.New("a public key, where the private key is needed: sign { key } takes the private key (keys/signing.key); its public key (keys/signing.pub) goes in trust { keys } where runs are restored")
	case "ENCRYPTED PRIVATE KEY":
		return nil, errors.New("an encrypted private key: pipe reads an unencrypted PKCS#8 key; keep it in a file only the backup's user reads (mode 0600), or " + keygenHint)
	case "OPENSSH PRIVATE KEY":
		return nil, errors.New("an OpenSSH key: sign takes a PKCS#8 PEM ed25519 key (-----BEGIN PRIVATE KEY-----); " + keygenHint)
	default:
		return nil, fmt.Errorf("a PEM block of type %q, not a private key (-----BEGIN PRIVATE KEY-----); %s", b.Type, keygenHint)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, errors.New("not a valid PKCS#8 private key; " + keygenHint)
	}
	priv, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a private key of another kind (%s), not ed25519; %s", keyKind(k), keygenHint)
	}
	return newPrivate(priv), nil
}

// ParsePublicKeys reads the public keys in the contents of a key file:
// one or more PKIX PEM blocks of ed25519 keys, "-----BEGIN PUBLIC KEY-----".
// A private key is refused: it belongs with the backup writer, never where
// restores run.
func ParsePublicKeys(text []byte) ([]PublicKey, error) {
	blocks, err := pemBlocks(text)
	if err != nil {
		return nil, err
	}
	if len(blocks) == 0 {
		return nil, errors.New("not a PEM ed25519 public key (-----BEGIN PUBLIC KEY-----): " + notPEM(text) + keygenHint)
	}
	var out []PublicKey
	for _, b := range blocks {
		switch b.Type {
		case "PUBLIC KEY":
		case "PRIVATE KEY", "ENCRYPTED PRIVATE KEY", "OPENSSH PRIVATE KEY":
			return nil, errors.New("a private key, where a public key is expected: trust { keys } takes public keys (keys/signing.pub); keep the private key (keys/signing.key) with the backup writer only")
		default:
			return nil, fmt.Errorf("a PEM block of type %q, not a public key (-----BEGIN PUBLIC KEY-----); %s", b.Type, keygenHint)
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, errors.New("not a valid PKIX public key; " + keygenHint)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("a public key of another kind (%s), not ed25519; %s", keyKind(k), keygenHint)
		}
		out = append(out, newPublic(pub))
	}
	return out, nil
}

// ParseTrust reads the keys of trust { keys }: the contents of public key
// files, several keys to a file allowed; a key given twice counts once.
func ParseTrust(texts []string) (Trust, error) {
	var t Trust
	for i, text := range texts {
		keys, err := ParsePublicKeys([]byte(text))
		if err != nil {
			return nil, fmt.Errorf("key %d: %w", i+1, err)
		}
		for _, k := range keys {
			if !slices.ContainsFunc(t, func(x PublicKey) bool { return x.fp == k.fp }) {
				t = append(t, k)
			}
		}
	}
	if len(t) == 0 {
		return nil, errors.New("no keys: give at least one public key file (keys/signing.pub)")
	}
	return t, nil
}

// pemBlocks returns the PEM blocks of text; text between them is
// allowed, as openssl allows it.
func pemBlocks(text []byte) ([]*pem.Block, error) {
	var out []*pem.Block
	rest := text
	for {
		b, r := pem.Decode(rest)
		if b == nil {
			break
		}
		if len(b.Headers) > 0 {
			return nil, errors.New("a PEM block with headers (an encrypted key, in OpenSSL's old format): pipe reads an unencrypted PKCS#8 private key or a PKIX public key")
		}
		out = append(out, b)
		rest = r
	}
	if len(out) == 0 && bytes.Contains(rest, []byte("-----BEGIN")) {
		return nil, errors.New("a damaged PEM block: it does not decode")
	}
	return out, nil
}

// notPEM says what text looks like when it holds no PEM block (an age key
// given by mistake), without quoting it.
func notPEM(text []byte) string {
	s := string(text)
	switch {
	case strings.Contains(s, "AGE-SECRET-KEY-"):
		return "this is an age identity, an encryption key (for decrypt { identities }); "
	case strings.HasPrefix(strings.TrimSpace(s), "age1") || strings.Contains(s, "\nage1"):
		return "this is an age recipient, an encryption key (for encrypt { recipients }); "
	case strings.HasPrefix(strings.TrimSpace(s), "ssh-"):
		return "this is an OpenSSH public key; "
	case strings.TrimSpace(s) == "":
		return "the file is empty; "
	}
	return ""
}

// keyKind names a parsed key's algorithm.
func keyKind(k any) string {
	t := fmt.Sprintf("%T", k)
	switch {
	case strings.Contains(t, "rsa"):
		return "RSA"
	case strings.Contains(t, "ecdsa"):
		return "ECDSA"
	case strings.Contains(t, "ecdh"):
		return "ECDH"
	}
	return t
}
