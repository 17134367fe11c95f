package encrypt

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"filippo.io/age"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// Ext is the extension encrypted streams get.
const Ext = ".age"

// MaxStored bounds what encrypting a stream of n bytes gives: age adds a
// header (4096 bytes are allowed for it) and 16 bytes per 64 KiB chunk,
// and 16 for the last one.
func MaxStored(n int64) int64 { return n + n/(64<<10)*16 + 16 + 4096 }

// streamMemory is what one age stream keeps: a plaintext and a ciphertext
// chunk of 64 KiB.
const streamMemory = 2 * (64<<10 + 16)

// scryptLogN is the scrypt work factor of passphrase encryption (age's
// default) and the highest a restore accepts: scrypt needs 128 × 8 × 2^N
// bytes while it derives a stream's key, 256 MiB at 18.
const scryptLogN = 18

// scryptMemory is what one scrypt derivation holds, once per stream.
const scryptMemory = 128 * 8 << scryptLogN

// Keys are the recipients a backup is encrypted to, or the identities a
// restore decrypts with.
type Keys struct {
	Recipients []age.Recipient
	Identities []age.Identity
	// Fingerprints identify the recipients (or the identities' recipients)
	// without revealing them.
	Fingerprints []string
	// scrypt says the keys are a passphrase's: each stream derives its key
	// with scrypt, which takes memory (scryptMemory).
	scrypt bool
	// passphrase says the keys stand for a passphrase: the passphrase's
	// own (scrypt), or a run key it wraps (see NewRunKey).
	passphrase bool
}

// Passphrase reports whether the keys stand for a passphrase.
func (k Keys) Passphrase() bool { return k.passphrase }

// RunKeyName is the base name of a run's key object beside its manifest.
const RunKeyName = "pipe-run-key.age"

// NewRunKey makes the key a passphrase backup encrypts its objects to: a
// fresh X25519 identity, wrapped for storage by the passphrase (one scrypt
// derivation for the whole run, where encrypting each object to the
// passphrase costs one per object: 40 small files took a minute). age -d
// opens the wrapped key with the passphrase, and age -d -i with the key
// every object of the run. pp are Passphrase's keys.
func NewRunKey(pp Keys) (run Keys, wrapped []byte, err error) {
	if !pp.scrypt {
		return Keys{}, nil, errors.New("a run key is wrapped by a passphrase")
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		return Keys{}, nil, err
	}
	var b bytes.Buffer
	w, err := age.Encrypt(&b, pp.Recipients...)
	if err != nil {
		return Keys{}, nil, err
	}
	if _, err := io.WriteString(w, "# the key of one pipe run's objects: age -d -i <this file, decrypted> OBJECT.age\n"+id.String()+"\n"); err != nil {
		return Keys{}, nil, err
	}
	if err := w.Close(); err != nil {
		return Keys{}, nil, err
	}
	r := id.Recipient()
	return Keys{Recipients: []age.Recipient{r}, Identities: []age.Identity{id}, Fingerprints: []string{Fingerprint(r.String())}, passphrase: true}, b.Bytes(), nil
}

// OpenRunKey unwraps a run key with the passphrase's keys pp.
func OpenRunKey(pp Keys, wrapped []byte) (Keys, error) {
	if !pp.scrypt {
		return Keys{}, errors.New("a run key opens with the passphrase: give decrypt { passphrase = … }")
	}
	r, err := age.Decrypt(bytes.NewReader(wrapped), pp.Identities...)
	if err != nil {
		if wrongKey(err) {
			return Keys{}, errors.New("wrong passphrase: it does not open the run's key")
		}
		return Keys{}, fmt.Errorf("the run's key is not a valid age file: %w", err)
	}
	text, err := io.ReadAll(io.LimitReader(r, 4096))
	if err != nil {
		return Keys{}, fmt.Errorf("the run's key is damaged: %w", err)
	}
	ks, err := ParseIdentities([]string{string(text)})
	if err != nil || len(ks.Identities) != 1 {
		return Keys{}, errors.New("the run's key does not hold one X25519 identity")
	}
	ks.passphrase = true
	return ks, nil
}

// ParseRecipients reads recipients from the contents of age recipient
// files: one "age1…" per line, # comments and blank lines allowed.
func ParseRecipients(texts []string) (Keys, error) {
	var k Keys
	for i, t := range texts {
		rs, err := age.ParseRecipients(strings.NewReader(t))
		if err != nil {
			return k, fmt.Errorf("recipient %d is not an age public key (age1…); `pipe keygen` makes a key pair", i+1)
		}
		for _, r := range rs {
			x, ok := r.(*age.X25519Recipient)
			if !ok {
				return k, fmt.Errorf("recipient %d: only X25519 recipients (age1…) are supported", i+1)
			}
			k.Recipients = append(k.Recipients, r)
			k.Fingerprints = append(k.Fingerprints, Fingerprint(x.String()))
		}
	}
	if len(k.Recipients) == 0 {
		return k, errors.New("no recipients: give at least one age public key (age1…)")
	}
	return k, nil
}

// ParseIdentities reads identities from the contents of age identity files
// (AGE-SECRET-KEY-1… lines).
func ParseIdentities(texts []string) (Keys, error) {
	var k Keys
	for i, t := range texts {
		ids, err := age.ParseIdentities(strings.NewReader(t))
		if err != nil {
			return k, fmt.Errorf("identity %d: %s", i+1, scrub(err))
		}
		for _, id := range ids {
			x, ok := id.(*age.X25519Identity)
			if !ok {
				return k, fmt.Errorf("identity %d: only X25519 identities are supported", i+1)
			}
			k.Identities = append(k.Identities, id)
			k.Fingerprints = append(k.Fingerprints, Fingerprint(x.Recipient().String()))
		}
	}
	if len(k.Identities) == 0 {
		return k, errors.New("no identities: give at least one age secret key file")
	}
	return k, nil
}

// Passphrase returns keys that encrypt and decrypt with a passphrase
// (scrypt). Each stream pays one scrypt derivation (about a second) on
// backup and on restore; prefer X25519 keys for many streams.
func Passphrase(p string) (Keys, error) {
	if p == "" {
		return Keys{}, errors.New("the passphrase is empty: set it, e.g. passphrase = env(\"PIPE_PASSPHRASE\") with that variable exported")
	}
	r, err := age.NewScryptRecipient(p)
	if err != nil {
		return Keys{}, err
	}
	r.SetWorkFactor(scryptLogN)
	id, err := age.NewScryptIdentity(p)
	if err != nil {
		return Keys{}, err
	}
	// A header asking for more would take more memory than the budget
	// counts (up to 4 GiB at age's limit of 22).
	id.SetMaxWorkFactor(scryptLogN)
	return Keys{Recipients: []age.Recipient{r}, Identities: []age.Identity{id}, Fingerprints: []string{"scrypt"}, scrypt: true, passphrase: true}, nil
}

// memory is what one stream of the stage holds at most: its chunks, and
// the scrypt derivation of a passphrase.
func (k Keys) memory() int64 {
	if k.scrypt {
		return streamMemory + scryptMemory
	}
	return streamMemory
}

// Fingerprint identifies a recipient without revealing it.
func Fingerprint(recipient string) string {
	sum := sha256.Sum256([]byte(recipient))
	return "sha256:" + hex.EncodeToString(sum[:8])
}

// scrub drops the offending input from age's parse errors, which may quote
// a (secret) line.
func scrub(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, ": "); i >= 0 && strings.Contains(msg, "AGE-SECRET-KEY") {
		return msg[:i]
	}
	if strings.Contains(msg, "AGE-SECRET-KEY") {
		return "malformed secret key"
	}
	return msg
}

// Describe says what the keys are, for summaries: "passphrase", "1
// recipient", "2 recipients".
func (k Keys) Describe() string {
	switch {
	case k.passphrase:
		return "passphrase"
	case len(k.Recipients) == 1:
		return "1 recipient"
	case len(k.Recipients) > 1:
		return fmt.Sprintf("%d recipients", len(k.Recipients))
	case len(k.Identities) == 1:
		return "1 identity"
	}
	return fmt.Sprintf("%d identities", len(k.Identities))
}

// Stage returns the encrypt stage.
func Stage(k Keys) engine.Stage {
	return engine.Stage{
		Name:   stagekind.Encrypt.Name,
		Label:  "age, " + k.Describe(),
		Proc:   encrypter{k.Recipients},
		Memory: k.memory(),
	}
}

// DecryptStage returns the decrypt stage.
func DecryptStage(k Keys) engine.Stage {
	return engine.Stage{
		Name:   stagekind.Decrypt.Name,
		Label:  "age, " + k.Describe(),
		Proc:   decrypter{identities: k.Identities, passphrase: k.scrypt},
		Memory: k.memory(),
	}
}

type encrypter struct{ recipients []age.Recipient }

func (e encrypter) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	w, err := age.Encrypt(dst, e.recipients...)
	if err != nil {
		return err
	}
	if _, err := io.Copy(w, src); err != nil {
		return err
	}
	return w.Close()
}

// wrongKey reports whether age failed to open data because none of the
// identities given (or the passphrase) matches it.
func wrongKey(err error) bool {
	var nm *age.NoIdentityMatchError
	return errors.As(err, &nm) || strings.Contains(err.Error(), "incorrect passphrase")
}

type decrypter struct {
	identities []age.Identity
	passphrase bool // the identities are a passphrase's (scrypt)
}

func (d decrypter) Stream(ctx context.Context, dst io.Writer, src io.Reader) error {
	r, err := open(src, d.identities, d.passphrase)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, r); err != nil {
		if ctx.Err() != nil {
			return err
		}
		return fmt.Errorf("decryption failed, the data is truncated or was tampered with: %w", err)
	}
	return nil
}

// Open returns the plaintext of the age file src, decrypted with the keys'
// identities, and says in its error why it cannot: other keys, a wrong
// passphrase, not an age file. A read of the result fails when the data
// was truncated or tampered with.
func (k Keys) Open(src io.Reader) (io.Reader, error) {
	return open(src, k.Identities, k.scrypt)
}

func open(src io.Reader, identities []age.Identity, passphrase bool) (io.Reader, error) {
	r, err := age.Decrypt(src, identities...)
	if err != nil {
		switch {
		case passphrase && wrongKey(err):
			return nil, errors.New("wrong passphrase: it does not open this stream (or the stream was encrypted to keys, not to a passphrase)")
		case wrongKey(err):
			return nil, errors.New("none of the identities opens this stream: it was encrypted to other keys (the manifest lists their fingerprints); use the matching identity file")
		}
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err // the reader's context ended: not the data's fault
		}
		return nil, fmt.Errorf("not a valid age file: %w", err)
	}
	return r, nil
}
