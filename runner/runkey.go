package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// wrappedKey is a passphrase backup's run key, wrapped for storage.
type wrappedKey struct {
	wrapped []byte
	digest  string
	keys    map[int]string // where each storage sink keeps it
}

// newRunKey gives a passphrase backup whose every sink keeps its objects
// (and so gets a manifest) a run key: the encrypt stage then encrypts to
// it. Nil when the backup has no passphrase, or feeds a consumer (a
// command, a database) that would get objects without their key.
func newRunKey(p *plan.Pipeline, sinks []*endpoint) (*wrappedKey, error) {
	enc := p.Stage(stagekind.Encrypt.Name)
	if enc == nil || !enc.Keys.Passphrase() {
		return nil, nil
	}
	for _, s := range sinks {
		if !s.def.Stores() {
			return nil, nil
		}
	}
	keys, wrapped, err := encrypt.NewRunKey(enc.Keys)
	if err != nil {
		return nil, fmt.Errorf("encrypt: making the run's key: %w", err)
	}
	enc.Keys = keys
	sum := sha256.Sum256(wrapped)
	return &wrappedKey{wrapped: wrapped, digest: "sha256:" + hex.EncodeToString(sum[:]), keys: map[int]string{}}, nil
}

// runKeyKey is where the run key goes beside the manifest at mkey.
func runKeyKey(mkey string) string {
	if i := strings.LastIndex(mkey, "pipe-manifest.json"); i >= 0 {
		return mkey[:i] + encrypt.RunKeyName
	}
	return mkey + "." + encrypt.RunKeyName
}

// write stores the key beside each sink's manifest, before any object.
func (k *wrappedKey) write(ctx context.Context, sinks []*endpoint, manifests map[int]string) error {
	for i, s := range sinks {
		mkey, ok := manifests[i]
		if !ok {
			continue
		}
		key := runKeyKey(mkey)
		if err := put(ctx, s.sink, key, k.wrapped); err != nil {
			k.remove(ctx, sinks)
			return fmt.Errorf("sink %s: writing the run's key %s: %w", s.name, key, err)
		}
		k.keys[i] = key
	}
	return nil
}

// remove takes the key objects back (the run failed).
func (k *wrappedKey) remove(ctx context.Context, sinks []*endpoint) {
	for i, key := range k.keys {
		if rm, ok := sinks[i].sink.(sdk.Remover); ok {
			_ = rm.Remove(context.WithoutCancel(ctx), key) // best effort: a failed run's leftovers are garbage retention collects
		}
	}
}

// openRunKey reads a passphrase backup's run key through the source and
// unwraps it with the decrypt stage's passphrase, which it replaces: one
// key derivation opens every object of the run.
func openRunKey(ctx context.Context, p *plan.Pipeline, src catalog.Store, r *catalog.Run) error {
	dec := p.Stage(stagekind.Decrypt.Name)
	m := r.Manifest
	key := manifest.Resolve(r.Key, m.RunKey.Key)
	if dec == nil {
		return nil // the caller says to add decrypt
	}
	if !dec.Keys.Passphrase() {
		return fmt.Errorf("the backup in %s was encrypted with a passphrase (its run's key is %s): give decrypt { passphrase = env(\"PIPE_PASSPHRASE\") } instead of identities", r.Key, key)
	}
	rc, err := src.Open(ctx, key)
	if err != nil {
		return fmt.Errorf("the backup's key %s: %w", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return fmt.Errorf("reading the backup's key %s: %w", key, err)
	}
	sum := sha256.Sum256(b)
	if int64(len(b)) != m.RunKey.Size || "sha256:"+hex.EncodeToString(sum[:]) != m.RunKey.Digest {
		return fmt.Errorf("the backup's key %s does not match its manifest: it is corrupt or was tampered with", key)
	}
	keys, err := encrypt.OpenRunKey(dec.Keys, bytes.Clone(b))
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	dec.Keys = keys
	return nil
}

// copyRunKey adds a copied run's key object to the streams a copy moves:
// without it the copy's objects could not be decrypted.
func copyRunKey(sp *streamsPlan) error {
	rk := sp.from.Manifest.RunKey
	if rk == nil {
		return nil
	}
	sp.streams = append(sp.streams, stream{source: manifest.Resolve(sp.from.Key, rk.Key), name: encrypt.RunKeyName,
		size: rk.Size, outSize: rk.Size, maxSize: rk.Size, digest: rk.Digest, runKey: true})
	if sp.total >= 0 {
		sp.total += rk.Size
	}
	return nil
}
