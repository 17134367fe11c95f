package manifest

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ChunksCodec is the codec of a deduplicated run's objects: each is the
// chunk list of its stream, and Dedup says how the chunks are stored. A
// pipe that does not know it refuses the manifest rather than restore the
// lists as the data.
const ChunksCodec = "chunks"

// PacksDir is the folder of a deduplicating store's packs, beside the
// folders of its runs.
const PacksDir = "pipe-chunks/"

// ChunksFormat is the format of the chunk lists (see stages/dedup).
const ChunksFormat = "pipe-chunks/v1"

// Dedup, in a deduplicated run, says how its chunks are stored.
type Dedup struct {
	// Format is the chunk lists' format.
	Format string `json:"format"`
	// Packs is the folder of the packs the lists name, relative to the
	// manifest's folder ("../pipe-chunks/").
	Packs string `json:"packs"`
	// Chunker says how streams were cut ("fastcdc 262144/1048576/4194304").
	Chunker string `json:"chunker"`
	// KeyCheck identifies the key the chunks were cut and named under:
	// runs share chunks only under one key.
	KeyCheck string `json:"key_check"`
	// Codec, Encryption and Recipients are how each chunk is sealed.
	Codec      string   `json:"codec"`
	Encryption string   `json:"encryption,omitempty"`
	Recipients []string `json:"recipients,omitempty"`
	// Chunks and Bytes count the run's chunks, each time one occurs;
	// NewChunks and NewBytes those the run stored; StoredBytes what that
	// added to the packs.
	Chunks      int64 `json:"chunks"`
	Bytes       int64 `json:"bytes"`
	NewChunks   int64 `json:"new_chunks"`
	NewBytes    int64 `json:"new_bytes"`
	StoredBytes int64 `json:"stored_bytes"`
}

func (d *Dedup) check() error {
	switch {
	case d.Format != ChunksFormat:
		return fmt.Errorf("dedup format %q is not %s", d.Format, ChunksFormat)
	case d.Packs == "" || strings.HasPrefix(d.Packs, "/") || !strings.HasSuffix(d.Packs, "/") || path.Clean(d.Packs) != strings.TrimSuffix(d.Packs, "/"):
		return fmt.Errorf("dedup packs %q is not a relative folder", d.Packs)
	case d.Codec != "zstd" && d.Codec != "none":
		return fmt.Errorf("dedup codec %q is not zstd or none", d.Codec)
	case d.Chunks < 0 || d.Bytes < 0 || d.NewChunks < 0 || d.NewBytes < 0 || d.StoredBytes < 0:
		return errors.New("dedup: a negative count")
	}
	for _, s := range []string{d.Chunker, d.KeyCheck} {
		if err := printable("dedup", s); err != nil {
			return err
		}
	}
	return checkEncryption("chunks", d.Encryption, d.Recipients)
}

// PacksFolder is the packs' folder of the deduplicated run whose manifest
// is at mkey, relative to the store's root; an error when it lies
// outside.
func (m *Manifest) PacksFolder(mkey string) (string, error) {
	if m.Dedup == nil {
		return "", errors.New("not a deduplicated run")
	}
	p := path.Join(path.Dir(mkey), m.Dedup.Packs)
	if p == ".." || strings.HasPrefix(p, "../") || strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("its packs (%s) lie outside the store as read: read the store from the folder that holds the run folders and %s", m.Dedup.Packs, PacksDir)
	}
	if p == "." {
		return "", nil
	}
	return p + "/", nil
}

// InPacks reports whether key lies in a deduplicating store's folder
// (PacksDir): a pack or a lock, which no manifest names and which is no
// failed run's leftover.
func InPacks(key string) bool {
	return strings.HasPrefix(key, PacksDir) || strings.Contains(key, "/"+PacksDir)
}
