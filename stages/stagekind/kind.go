package stagekind

import "github.com/pipebackup/pipe/plugins/sdk"

// Direction is what a kind does to the stored form of a backup.
type Direction int

const (
	// Observes leaves the bytes as they are (checksum).
	Observes Direction = iota
	// Encodes writes a stored form (compress, encrypt): a backup.
	Encodes
	// Decodes reads a stored form back (decompress, decrypt): a restore.
	Decodes
)

// Kind is one kind of stage.
type Kind struct {
	// Name is the type of the stage's block in a pipeline file
	// ("compress"), the name of its engine stage and of its meter.
	Name      string
	Direction Direction
	// Undoes is, for a decoding kind, the encoding kind whose stored form
	// it reads back (decompress undoes compress).
	Undoes *Kind
	// ChunkParallel kinds have workers that share the chunks of every
	// stream (a codec's frames): their block takes workers and chunk_size.
	ChunkParallel bool
	// Attributes declares the attributes of the kind's block.
	Attributes []sdk.Attribute
}

// Encodes reports whether the kind writes a stored form.
func (k *Kind) Encodes() bool { return k.Direction == Encodes }

// Decodes reports whether the kind reads a stored form back.
func (k *Kind) Decodes() bool { return k.Direction == Decodes }

// Attribute returns the kind's attribute called name.
func (k *Kind) Attribute(name string) (sdk.Attribute, bool) {
	for _, a := range k.Attributes {
		if a.Name == name {
			return a, true
		}
	}
	return sdk.Attribute{}, false
}

// The kinds.
var (
	Compress = &Kind{Name: "compress", Direction: Encodes, ChunkParallel: true, Attributes: []sdk.Attribute{
		{Name: "codec", Type: sdk.String, Default: "zstd", Description: "zstd, gzip, lz4 or none."},
		{Name: "level", Type: sdk.Number, Description: "Compression level in the codec's scale (default from the profile)."},
		{Name: "workers", Type: sdk.Number, Description: "Encoders working at once, shared by all streams (default from the profile)."},
		{Name: "chunk_size", Type: sdk.Size, Description: "Frame size: each frame is compressed independently (default: the pipeline's chunk_size)."},
	}}
	Decompress = &Kind{Name: "decompress", Direction: Decodes, Undoes: Compress, ChunkParallel: true, Attributes: []sdk.Attribute{
		{Name: "codec", Type: sdk.String, Default: "auto", Description: "zstd, gzip, lz4, none, or auto: from the manifest, else from the file extension."},
		{Name: "workers", Type: sdk.Number, Description: "Decoders working at once (zstd frames decode in parallel)."},
		{Name: "chunk_size", Type: sdk.Size, Description: "Largest frame expected (default: the manifest's frame size, else chunk_size); larger frames decode sequentially."},
	}}
	Encrypt = &Kind{Name: "encrypt", Direction: Encodes, Attributes: []sdk.Attribute{
		{Name: "recipients", Type: sdk.StringList, Description: `age public keys (age1…) or the contents of recipient files: [file("keys/backup.pub")].`},
		{Name: "passphrase", Type: sdk.String, Secret: true, Description: `Encrypt with a passphrase instead (scrypt), e.g. env("PIPE_PASSPHRASE").`},
	}}
	Decrypt = &Kind{Name: "decrypt", Direction: Decodes, Undoes: Encrypt, Attributes: []sdk.Attribute{
		{Name: "identities", Type: sdk.StringList, Secret: true, Description: `Contents of age identity files: [file("keys/backup.key")].`},
		{Name: "passphrase", Type: sdk.String, Secret: true, Description: "The passphrase the backup was encrypted with."},
	}}
	Dedup = &Kind{Name: "dedup", Direction: Encodes, ChunkParallel: true, Attributes: []sdk.Attribute{
		{Name: "key", Type: sdk.String, Secret: true, Required: true, Description: `The store's deduplication key: file("keys/dedup.key"), which pipe keygen --dedup writes. Runs share chunks only under the same key.`},
		{Name: "chunk_size", Type: sdk.Size, Default: int64(1 << 20), Description: "Average chunk size, a power of two; chunks run from a quarter of it to four times it."},
		{Name: "pack_size", Type: sdk.Size, Default: int64(16 << 20), Description: "Size at which a pack (an object of many chunks) is closed."},
		{Name: "index_memory", Type: sdk.Size, Default: int64(64 << 20), Description: "Memory for the index of chunks the store holds (about 200 bytes a chunk); chunks of older runs beyond it are stored again."},
		{Name: "workers", Type: sdk.Number, Description: "Chunks named, compressed and encrypted at once, shared by all streams (default: one more than the profile gives compress)."},
		{Name: "grace", Type: sdk.String, Default: "24h", Description: `Prune deletes a pack no run names only once it is this old, and not while a backup that announced itself within it is unfinished (a running backup renews its announcement every quarter of it): "24h", "2d".`},
	}}
	Checksum = &Kind{Name: "checksum", Direction: Observes, Attributes: []sdk.Attribute{
		{Name: "algorithm", Type: sdk.String, Default: "sha256", Description: "Digest of the stored bytes; sha256."},
	}}
)

// All lists every kind, in the order a pipeline file's schema lists their
// blocks.
var All = []*Kind{Dedup, Compress, Decompress, Encrypt, Decrypt, Checksum}

// Lookup returns the kind called name, or nil.
func Lookup(name string) *Kind {
	for _, k := range All {
		if k.Name == name {
			return k
		}
	}
	return nil
}
