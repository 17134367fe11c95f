// Package manifest is the record a backup run writes last, beside its
// objects: the run, its pipeline and, per object, its stream, key, sizes,
// digest, codec and recipients' fingerprints. No manifest, no backup: a run
// that did not finish has none, and a restore reads one to know what to
// restore and how to verify it.
//
// It holds no secret: recipients appear as fingerprints only. It must not
// import the engine or a plugin.
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"
)

// Format identifies this version of the manifest.
const Format = "pipe-manifest/v1"

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
	// PipeVersion is the version of pipe that wrote the manifest.
	PipeVersion string `json:"pipe_version,omitempty"`
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

// Marshal encodes m.
func (m *Manifest) Marshal() ([]byte, error) {
	m.Format = Format
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Parse decodes and checks a manifest. Stream names and keys come from
// storage and so are untrusted: they must be relative paths that stay
// inside the restore target.
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
	if m.RunID == "" {
		return nil, errors.New("invalid manifest: no run_id")
	}
	seen := map[string]bool{}
	for i, o := range m.Objects {
		if !safeName(o.Stream) {
			return nil, fmt.Errorf("invalid manifest: object %d: stream name %q is not a relative path inside the target", i, o.Stream)
		}
		if o.Key == "" || strings.HasPrefix(o.Key, "/") {
			return nil, fmt.Errorf("invalid manifest: object %d: key %q must be relative to the manifest", i, o.Key)
		}
		if seen[o.Stream] {
			return nil, fmt.Errorf("invalid manifest: stream %q appears twice", o.Stream)
		}
		seen[o.Stream] = true
		if o.Size < 0 || o.OriginalSize < -1 {
			return nil, fmt.Errorf("invalid manifest: object %d: negative size", i)
		}
	}
	return &m, nil
}

func safeName(s string) bool {
	return s != "" && fs.ValidPath(s)
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
