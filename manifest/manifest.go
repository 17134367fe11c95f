// Package manifest is the record a backup run writes last, beside its
// objects: the run, its pipeline and, per object, its stream, key, sizes,
// digest, codec and recipients' fingerprints. No manifest, no backup: a run
// that did not finish has none, and a restore reads one to know what to
// restore and how to verify it.
//
// It holds no secret: recipients appear as fingerprints only. It must not
// import the engine or a plugin (the plugin SDK's name rule is its only
// dependency).
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// Format identifies this version of the manifest.
const Format = "pipe-manifest/v1"

// FileName is a manifest's base name in a run's folder.
const FileName = "pipe-manifest.json"

// IsKey reports whether an object key names a pipe manifest: a folder's
// pipe-manifest.json, or a name with "pipe-manifest" in it ending in
// .json (a template's or a single object's manifest).
func IsKey(key string) bool {
	base := path.Base(key)
	return strings.Contains(base, "pipe-manifest") && strings.HasSuffix(base, ".json")
}

// MaxSize bounds the manifest a restore reads (about a million objects).
const MaxSize = 512 << 20

// Manifest describes one backup run.
type Manifest struct {
	Format     string    `json:"format"`
	RunID      string    `json:"run_id"`
	Pipeline   string    `json:"pipeline"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// FrameSize is the largest frame a restore meets (the compress stage's
	// chunk size); decompression sizes its buffers by it.
	FrameSize int64 `json:"frame_size,omitempty"`
	// Source holds facts about what was backed up (endpoint type, …).
	Source  map[string]string `json:"source,omitempty"`
	Objects []Object          `json:"objects"`
	// Failed are the streams of the run that failed while the others
	// were stored: a cluster's databases stand alone (see
	// sdk.Independent). A run with failed streams is partial: it restores
	// what it holds, and retention does not count it.
	Failed []Failed `json:"failed,omitempty"`
	// Independent says the run's streams stand alone (a cluster's
	// databases): a restore of it goes on past one that fails, as the
	// backup did.
	Independent bool `json:"independent,omitempty"`
	// RunKey, for a backup encrypted with a passphrase, is the object that
	// holds the key of the run's objects, itself encrypted to the
	// passphrase (age's scrypt): one key derivation opens the whole run.
	RunKey *RunKey `json:"run_key,omitempty"`
	// PipeVersion is the version of pipe that wrote the manifest.
	PipeVersion string `json:"pipe_version,omitempty"`
	// CopiedAt is when the run was copied here from another store (a
	// copy keeps the run's id, pipeline and times); zero for the original.
	CopiedAt time.Time `json:"copied_at,omitzero"`
	// Damage, when set, says what the source found damaged in what it
	// read (see sdk.FactDamage): the run holds everything the source sent,
	// damaged parts included. Like a partial run, retention does not count
	// it as a complete run, and verify reports it.
	Damage string `json:"damage,omitempty"`
	// Listing is what a later run of the source needs of this one to
	// read only what changed since (see sdk.Chainer): a PostgreSQL
	// server's file names and sizes, never their contents. Opaque to
	// pipe; valid UTF-8.
	Listing string `json:"listing,omitempty"`
	// Dedup, in a deduplicated run, says how its chunks are stored: its
	// objects are chunk lists (codec ChunksCodec).
	Dedup *Dedup `json:"dedup,omitempty"`
	// Signature, in a signed manifest, is its last member: the signature
	// of the bytes before it, as package signing writes and checks it
	// (the bytes as read, never the manifest encoded again). Marshal
	// writes a manifest without it; package signing adds it.
	Signature *Signature `json:"signature,omitempty"`
}

// Signature is a signed manifest's signature member.
type Signature struct {
	// Key is the fingerprint of the key that signed the manifest,
	// "ed25519:<hex SHA-256 of the public key>".
	Key string `json:"key"`
	// Ed25519 is the signature, in standard base64.
	Ed25519 string `json:"ed25519"`
}

// Failed is a stream that was not stored, and why.
type Failed struct {
	Stream string `json:"stream"`
	Error  string `json:"error"`
}

// MaxErrorLen bounds a failed stream's error in a manifest.
const MaxErrorLen = 4096

// Partial reports whether some of the run's streams failed.
func (m *Manifest) Partial() bool { return len(m.Failed) > 0 }

// Damaged reports whether the source found what it read damaged.
func (m *Manifest) Damaged() bool { return m.Damage != "" }

// RunKey is where a passphrase backup keeps its run's key.
type RunKey struct {
	// Key is where the object is, relative to the manifest's folder.
	Key    string `json:"key"`
	Size   int64  `json:"size"`
	Digest string `json:"digest"`
}

// Object is one stored stream.
type Object struct {
	// Stream is the stream's original name (a file's path, a table).
	Stream string `json:"stream"`
	// Key is where the object is, relative to the manifest's folder.
	Key string `json:"key"`
	// Size is the stored size in bytes; OriginalSize the stream's size
	// before compression and encryption.
	Size         int64 `json:"size"`
	OriginalSize int64 `json:"original_size"`
	// Digest of the stored bytes, "sha256:<hex>"; empty without a checksum
	// stage.
	Digest string `json:"digest,omitempty"`
	// Codec is the compression ("zstd", "gzip", "lz4" or "none").
	Codec string `json:"codec"`
	// Encryption is "age" or empty; Recipients are the fingerprints of the
	// keys that can open the object ("scrypt" for a passphrase).
	Encryption string   `json:"encryption,omitempty"`
	Recipients []string `json:"recipients,omitempty"`
}

// Marshal encodes m, unsigned (without its Signature): the bytes a
// signature covers.
func (m *Manifest) Marshal() ([]byte, error) {
	m.Format = Format
	u := *m
	u.Signature = nil
	b, err := json.MarshalIndent(&u, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Parse decodes and checks a manifest. A manifest comes from storage and
// so is untrusted: Parse refuses anything pipe could never have written (a
// run without objects, an object without a digest, an unknown codec, a run
// id, pipeline or stream name that could escape a folder or forge a line of
// output), so that what passes can be restored, listed and verified
// safely. Keys may climb out of the manifest's folder ("../users/r1.zst",
// see Rel); readers check that the resolved key stays inside their store.
func Parse(b []byte) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("not a pipe manifest: %w", err)
	}
	if m.Format != Format {
		if strings.HasPrefix(m.Format, "pipe-manifest/") {
			return nil, fmt.Errorf("manifest format %q is newer than this pipe understands (%s): upgrade pipe", m.Format, Format)
		}
		return nil, errors.New("not a pipe manifest: no format field")
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("invalid manifest: %w", err)
	}
	return &m, nil
}

// Codecs are the compressions a manifest may name.
var Codecs = []string{"none", "zstd", "gzip", "lz4"}

// MaxFrameSize bounds the frame size a manifest may declare (a restore
// sizes its buffers by it).
const MaxFrameSize = 1 << 30

// The names and digests a manifest may hold. Their lengths are checked
// apart (see matches): a counted repetition such as {0,127} compiles to
// that many copies of the class, a quarter of a megabyte built at every
// pipe process's start (pipe wal runs one per WAL segment).
var (
	runIDRE    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	pipelineRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
	digestRE   = regexp.MustCompile(`^sha256:[0-9a-f]*$`)
	signerRE   = regexp.MustCompile(`^ed25519:[0-9a-f]*$`)
	sigRE      = regexp.MustCompile(`^[A-Za-z0-9+/]*=*$`)
)

// matches reports whether s matches re and has from min to max bytes.
func matches(re *regexp.Regexp, s string, minLen, maxLen int) bool {
	return len(s) >= minLen && len(s) <= maxLen && re.MatchString(s)
}

// validDigest reports whether s is sha256:<64 lowercase hex digits>.
func validDigest(s string) bool { return matches(digestRE, s, 71, 71) }

// check refuses a manifest pipe could not have written: the run's fields,
// the source's facts, the run key, the signature's form, then the objects
// and failed streams, in that order (the first fault found is the one
// reported).
func (m *Manifest) check() error {
	if err := m.checkRun(); err != nil {
		return err
	}
	if err := m.checkSource(); err != nil {
		return err
	}
	if k := m.RunKey; k != nil {
		if err := k.check(); err != nil {
			return err
		}
	}
	if d := m.Dedup; d != nil {
		if err := d.check(); err != nil {
			return err
		}
	}
	if s := m.Signature; s != nil {
		if err := s.check(); err != nil {
			return err
		}
	}
	return m.checkStreams()
}

// checkRun checks the fields that describe the run as a whole.
func (m *Manifest) checkRun() error {
	switch {
	case m.RunID == "":
		return errors.New("no run_id")
	case !matches(runIDRE, m.RunID, 1, 128) || strings.Contains(m.RunID, ".."):
		return fmt.Errorf("run_id %q is not one pipe writes (letters, digits, ., _ and -)", m.RunID)
	case !matches(pipelineRE, m.Pipeline, 1, 128):
		return fmt.Errorf("pipeline %q is not a pipeline name", m.Pipeline)
	case m.StartedAt.IsZero() || m.FinishedAt.IsZero():
		return errors.New("no started_at or finished_at")
	case m.FinishedAt.Before(m.StartedAt):
		return errors.New("finished_at is before started_at")
	case m.FrameSize < 0 || m.FrameSize > MaxFrameSize:
		return fmt.Errorf("frame_size %d is out of range (0 to %d)", m.FrameSize, MaxFrameSize)
	case len(m.Objects) == 0:
		return errors.New("no objects: a run that backed up nothing has no manifest")
	}
	if err := printable("pipe_version", m.PipeVersion); err != nil {
		return err
	}
	if !utf8.ValidString(m.Listing) {
		return errors.New("listing is not valid UTF-8")
	}
	return printable("damage", m.Damage)
}

// checkSource checks the source's facts: named, and printable.
func (m *Manifest) checkSource() error {
	for k, v := range m.Source {
		if k == "" {
			return errors.New("source: a fact with an empty name")
		}
		if err := printable("source fact name", k); err != nil {
			return err
		}
		if err := printable("source fact "+k, v); err != nil {
			return err
		}
	}
	return nil
}

// check checks the run key's object: where, its size and its digest.
func (k *RunKey) check() error {
	switch {
	case k.Key == "" || strings.HasPrefix(k.Key, "/"):
		return fmt.Errorf("run_key: key %q must be relative to the manifest", k.Key)
	case k.Size <= 0:
		return errors.New("run_key: no size")
	case !validDigest(k.Digest):
		return fmt.Errorf("run_key: digest %q is not sha256:<64 hex digits>", k.Digest)
	}
	return printable("run_key key", k.Key)
}

// check checks the signature member's form (whether it is the last
// member and signs the manifest is package signing's to say).
func (s *Signature) check() error {
	switch {
	case !matches(signerRE, s.Key, 72, 72):
		return fmt.Errorf("signature: key %q is not ed25519:<64 hex digits>", s.Key)
	case !matches(sigRE, s.Ed25519, 88, 88):
		return errors.New("signature: ed25519 is not the base64 of a 64-byte signature")
	}
	return nil
}

// checkStreams checks each object and each failed stream, and that no
// stream appears twice among them.
func (m *Manifest) checkStreams() error {
	seen := map[string]bool{}
	for i, o := range m.Objects {
		if err := o.check(); err != nil {
			return fmt.Errorf("object %d: %w", i, err)
		}
		if (o.Codec == ChunksCodec) != (m.Dedup != nil) {
			return fmt.Errorf("object %d: codec %s in a run that is %sdeduplicated", i, o.Codec, map[bool]string{true: "", false: "not "}[m.Dedup != nil])
		}
		if m.RunKey != nil && o.Encryption != "age" {
			return fmt.Errorf("object %d: a run key but %s is not encrypted", i, o.Key)
		}
		if seen[o.Stream] {
			return fmt.Errorf("stream %q appears twice", o.Stream)
		}
		seen[o.Stream] = true
	}
	for i, f := range m.Failed {
		if err := sdk.CheckStreamName(f.Stream); err != nil {
			return fmt.Errorf("failed stream %d: stream name: %w", i, err)
		}
		if seen[f.Stream] {
			return fmt.Errorf("stream %q is both stored and failed", f.Stream)
		}
		seen[f.Stream] = true
		if len(f.Error) > MaxErrorLen {
			return fmt.Errorf("failed stream %q: an error of %d bytes (at most %d)", f.Stream, len(f.Error), MaxErrorLen)
		}
		if err := printable("failed stream's error", f.Error); err != nil {
			return err
		}
	}
	return nil
}

func (o *Object) check() error {
	if err := sdk.CheckStreamName(o.Stream); err != nil {
		return fmt.Errorf("stream name: %w", err)
	}
	if o.Key == "" || strings.HasPrefix(o.Key, "/") {
		return fmt.Errorf("key %q must be relative to the manifest", o.Key)
	}
	if err := printable("key", o.Key); err != nil {
		return err
	}
	switch {
	case o.Size < 0 || o.OriginalSize < -1:
		return errors.New("negative size")
	case o.Digest == "":
		return fmt.Errorf("%s has no digest: nothing could verify it", o.Key)
	case !validDigest(o.Digest):
		return fmt.Errorf("digest %q of %s is not sha256:<64 hex digits>", o.Digest, o.Key)
	case !slices.Contains(Codecs, o.Codec) && o.Codec != ChunksCodec:
		return fmt.Errorf("codec %q of %s is not one of %s", o.Codec, o.Key, strings.Join(Codecs, ", "))
	}
	return checkEncryption(o.Key, o.Encryption, o.Recipients)
}

// checkEncryption checks what says how something (what) is encrypted.
func checkEncryption(what, encryption string, recipients []string) error {
	switch encryption {
	case "":
		if len(recipients) > 0 {
			return fmt.Errorf("%s names recipients but no encryption", what)
		}
	case "age":
		if len(recipients) == 0 {
			return fmt.Errorf("%s is encrypted to no recipient", what)
		}
		for _, r := range recipients {
			if r == "" {
				return fmt.Errorf("%s: an empty recipient", what)
			}
			if err := printable("recipient", r); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("encryption %q of %s is not age", encryption, what)
	}
	return nil
}

// printable refuses control characters, which would forge lines of a
// listing or a log.
func printable(what, s string) error {
	if !utf8.ValidString(s) {
		return fmt.Errorf("%s %q is not valid UTF-8", what, s)
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("%s %q holds a control character", what, s)
		}
	}
	return nil
}

// Rel returns key relative to the folder of manifestKey, for Object.Key.
func Rel(manifestKey, key string) string {
	dir := path.Dir(manifestKey)
	if dir == "." {
		return key
	}
	if strings.HasPrefix(key, dir+"/") {
		return key[len(dir)+1:]
	}
	// Walk up from the manifest's folder to the common ancestor.
	d := strings.Split(dir, "/")
	k := strings.Split(key, "/")
	i := 0
	for i < len(d) && i < len(k)-1 && d[i] == k[i] {
		i++
	}
	return strings.Repeat("../", len(d)-i) + strings.Join(k[i:], "/")
}

// Resolve returns the key of an object of the manifest at manifestKey.
func Resolve(manifestKey, rel string) string {
	return path.Join(path.Dir(manifestKey), rel)
}
