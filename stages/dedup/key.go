package dedup

import (
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/zeebo/blake3"
)

// keyPrefix starts the one line of a key file that holds the key.
const keyPrefix = "PIPE-DEDUP-KEY-1-"

// Key is a store's deduplication secret. Two runs share chunks only when
// they use the same key.
type Key struct {
	cut   []byte // keys the chunker's gear table
	id    []byte // keys the chunk IDs
	check string
}

// NewKeyFile returns the text of a new key file: a comment and the key.
func NewKeyFile() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "# pipe deduplication key (dedup { key = file(…) }): keep it secret, and a copy of it;\n" +
		"# a run under another key shares no chunk with the runs before it.\n" +
		keyPrefix + base64.RawURLEncoding.EncodeToString(b[:]) + "\n", nil
}

// ParseKey reads a key file's text: one line with the key, # comments and
// blank lines allowed. Its errors never quote the text.
func ParseKey(text string) (Key, error) {
	var secret []byte
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if secret != nil {
			return Key{}, fmt.Errorf("line %d: a key file holds one key", i+1)
		}
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(line, keyPrefix))
		if !strings.HasPrefix(line, keyPrefix) || err != nil || len(b) != 32 {
			return Key{}, fmt.Errorf("line %d is not a deduplication key (%s…, as pipe keygen --dedup writes)", i+1, keyPrefix)
		}
		secret = b
	}
	if secret == nil {
		return Key{}, errors.New("no deduplication key in it (pipe keygen --dedup writes one)")
	}
	derive := func(info string) []byte {
		k, err := hkdf.Key(sha256.New, secret, nil, "pipe dedup "+info, 32)
		if err != nil {
			panic(err) // 32 bytes of SHA-256 HKDF cannot fail
		}
		return k
	}
	return Key{cut: derive("chunker"), id: derive("chunk id"), check: hex.EncodeToString(derive("check")[:8])}, nil
}

// Check identifies the key without revealing it: runs under one key have
// the same check, recorded in their manifests.
func (k Key) Check() string { return k.check }

// ID names a chunk: the keyed BLAKE3 hash of its bytes under the store's
// key (b3sum --keyed checks it).
type ID [32]byte

func (id ID) String() string { return hex.EncodeToString(id[:]) }

// IDHasher computes chunk IDs; one goroutine uses it at a time.
type IDHasher struct{ h *blake3.Hasher }

// Hasher returns a new IDHasher under the key.
func (k Key) Hasher() *IDHasher {
	h, err := blake3.NewKeyed(k.id)
	if err != nil {
		panic(err) // the key is 32 bytes
	}
	return &IDHasher{h: h}
}

// Sum returns the ID of the chunk plain.
func (h *IDHasher) Sum(plain []byte) ID {
	h.h.Reset()
	_, _ = h.h.Write(plain) // a hash takes every byte
	var id ID
	h.h.Sum(id[:0])
	return id
}
