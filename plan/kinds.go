package plan

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/stages/checksum"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// ops is what plan does with one stage kind: stagekind says what the kind
// is (its name, direction, attributes), ops how its block resolves, how
// its engine stage is built and what it does to a stream's name and size,
// each by asking the stage's own package. Every kind of stagekind.All has
// its ops here (TestKindOps); nothing else in pipe switches on a kind.
type ops struct {
	// resolve reads the kind's own settings from its block into s (the
	// workers and chunk_size of every kind are read before); keep false
	// drops the stage, and the diagnostics say why.
	resolve func(s *Stage, b *pipefile.Block, p *Pipeline) (keep bool, diags hcl.Diagnostics)
	// idle reports whether the stage, as resolved, leaves the bytes as
	// they are and runs nothing (a codec of "none"); nil: never.
	idle func(s *Stage) bool
	// stage builds the engine stage; ok false when there is nothing to run
	// after all. decodeCodec and frame are Job's.
	stage func(s *Stage, p *Pipeline, decodeCodec string, frame int) (st engine.Stage, ok bool, err error)
	// ext is the extension an encoding stage adds to a stream's name.
	ext func(s *Stage) string
	// maxOut bounds what an encoding stage makes of n bytes.
	maxOut func(s *Stage, n int64) int64
	// strip takes a decoding stage's extension off name; stream is the
	// source's name of the stream, for messages. codec is the codec found
	// from the name when the stage's is "auto", else "".
	strip func(s *Stage, name, stream string) (rest, codec string, err error)
	// describe says what the stage does, for plans.
	describe func(s *Stage) string
}

var kindOps = map[*stagekind.Kind]ops{
	stagekind.Dedup: dedupOps,
	stagekind.Compress: {
		resolve: func(s *Stage, b *pipefile.Block, p *Pipeline) (bool, hcl.Diagnostics) {
			s.Codec = b.String("codec")
			if s.Codec == "none" {
				return true, nil
			}
			c, ok := compress.Lookup(s.Codec)
			if !ok {
				return false, hcl.Diagnostics{unknownCodec(b, s.Codec, false)}
			}
			s.Level = c.DefaultLevel
			if l, ok := p.Profile.Levels[c.Name]; ok {
				s.Level = l
			}
			if n, ok := b.Int("level"); ok {
				s.Level = int(n)
				if err := c.CheckLevel(s.Level); err != nil {
					return true, hcl.Diagnostics{errAt(b.AttrRange("level"), "Invalid compression level", err.Error()+".")}
				}
			}
			return true, nil
		},
		idle: codecNone,
		stage: func(s *Stage, p *Pipeline, _ string, _ int) (engine.Stage, bool, error) {
			c, _ := compress.Lookup(s.Codec)
			st, err := c.Stage(s.Level, s.Workers, s.ChunkSize)
			if err != nil {
				return st, false, fmt.Errorf("compress: %w", err)
			}
			return st, true, nil
		},
		ext: func(s *Stage) string {
			if c, ok := compress.Lookup(s.Codec); ok {
				return c.Ext
			}
			return ""
		},
		maxOut: func(s *Stage, n int64) int64 { return compress.MaxStored(n, s.ChunkSize) },
		describe: func(s *Stage) string {
			if s.Codec == "none" {
				return "none (data stored as is)"
			}
			return fmt.Sprintf("%s level %d%s, %s%s, frames of %s", s.Codec, s.Level, s.fromProfile("level"), Plural(s.Workers, "worker"), s.fromProfile("workers"), size(int64(s.ChunkSize)))
		},
	},
	stagekind.Decompress: {
		resolve: func(s *Stage, b *pipefile.Block, p *Pipeline) (bool, hcl.Diagnostics) {
			s.Codec = b.String("codec")
			if s.Codec != "auto" && s.Codec != "none" {
				if _, ok := compress.Lookup(s.Codec); !ok {
					return false, hcl.Diagnostics{unknownCodec(b, s.Codec, true)}
				}
			}
			return true, nil
		},
		idle: codecNone,
		stage: func(s *Stage, p *Pipeline, decodeCodec string, frame int) (engine.Stage, bool, error) {
			codec := s.Codec
			if codec == "auto" {
				codec = decodeCodec
				if codec == "" {
					codec = "zstd"
				}
			}
			if codec == "none" {
				return engine.Stage{}, false, nil
			}
			c, ok := compress.Lookup(codec)
			if !ok {
				return engine.Stage{}, false, fmt.Errorf("decompress: unknown codec %q", codec)
			}
			f := s.ChunkSize
			if frame > 0 && !s.Explicit["chunk_size"] {
				f = max(frame, p.ChunkSize)
			}
			return c.DecompressStage(s.Workers, f), true, nil
		},
		strip: func(s *Stage, name, stream string) (string, string, error) {
			codec, found := s.Codec, ""
			if codec == "auto" {
				c, ok := compress.ByExt(name)
				if !ok {
					return "", "", fmt.Errorf("cannot tell how %s is compressed from its name: set decompress { codec = \"zstd\" } (or gzip, lz4, none)", stream)
				}
				codec, found = c.Name, c.Name
			}
			if c, ok := compress.Lookup(codec); ok {
				name = strings.TrimSuffix(name, c.Ext)
			}
			return name, found, nil
		},
		describe: func(s *Stage) string {
			codec := s.Codec
			if codec == "auto" {
				codec = "codec from the manifest or the file extension"
			}
			return fmt.Sprintf("%s, %s%s", codec, Plural(s.Workers, "worker"), s.fromProfile("workers"))
		},
	},
	stagekind.Encrypt: {
		resolve: resolveKeys("recipients", encrypt.ParseRecipients, `recipients = [file("keys/backup.pub")]`),
		stage: func(s *Stage, _ *Pipeline, _ string, _ int) (engine.Stage, bool, error) {
			return encrypt.Stage(s.Keys), true, nil
		},
		ext:      func(*Stage) string { return encrypt.Ext },
		maxOut:   func(_ *Stage, n int64) int64 { return encrypt.MaxStored(n) },
		describe: describeKeys("recipient"),
	},
	stagekind.Decrypt: {
		resolve: resolveKeys("identities", encrypt.ParseIdentities, `identities = [file("keys/backup.key")]`),
		stage: func(s *Stage, _ *Pipeline, _ string, _ int) (engine.Stage, bool, error) {
			return encrypt.DecryptStage(s.Keys), true, nil
		},
		strip: func(_ *Stage, name, _ string) (string, string, error) {
			return strings.TrimSuffix(name, encrypt.Ext), "", nil
		},
		describe: describeKeys("identity"),
	},
	stagekind.Checksum: {
		resolve: func(s *Stage, b *pipefile.Block, _ *Pipeline) (bool, hcl.Diagnostics) {
			if alg := b.String("algorithm"); alg != checksum.Algorithm {
				return false, hcl.Diagnostics{errAt(b.AttrRange("algorithm"), "Unsupported checksum algorithm", fmt.Sprintf("%q: the checksum stage computes sha256.", alg))}
			}
			return true, nil
		},
		stage: func(*Stage, *Pipeline, string, int) (engine.Stage, bool, error) {
			return checksum.Stage(), true, nil
		},
		describe: func(s *Stage) string {
			if s.Implicit {
				return "sha256 of the stored bytes, into the manifest (always on for a backup)"
			}
			return "sha256 of the stored bytes, into the manifest"
		},
	},
}

func codecNone(s *Stage) bool { return s.Codec == "none" }

// unknownCodec is the error of a codec compress does not know.
func unknownCodec(b *pipefile.Block, codec string, auto bool) *hcl.Diagnostic {
	names := compress.Names()
	if auto {
		names = append(names, "auto")
	}
	return errAt(b.AttrRange("codec"), "Unknown codec", fmt.Sprintf("%q is not a codec; codecs are %s.", codec, strings.Join(names, ", ")))
}

// resolveKeys reads encrypt's recipients or decrypt's identities
// (keysAttr, parsed by parse), or a passphrase; example is the keys line
// a missing-keys error suggests.
func resolveKeys(keysAttr string, parse func([]string) (encrypt.Keys, error), example string) func(*Stage, *pipefile.Block, *Pipeline) (bool, hcl.Diagnostics) {
	return func(s *Stage, b *pipefile.Block, _ *Pipeline) (bool, hcl.Diagnostics) {
		switch {
		case b.Has(keysAttr) && b.Has("passphrase"):
			return false, hcl.Diagnostics{errAt(b.AttrRange("passphrase"), "Keys and passphrase", fmt.Sprintf("Give %s or passphrase, not both.", keysAttr))}
		case b.Unknown[keysAttr] || b.Unknown["passphrase"]:
			// Known at run time only.
		case b.Has("passphrase"):
			k, err := encrypt.Passphrase(b.String("passphrase"))
			if err != nil {
				return false, hcl.Diagnostics{errAt(b.AttrRange("passphrase"), "Invalid passphrase", err.Error()+".")}
			}
			s.Keys = k
		case b.Has(keysAttr):
			k, err := parse(b.Strings(keysAttr))
			if err != nil {
				return false, hcl.Diagnostics{errAt(b.AttrRange(keysAttr), "Invalid "+keysAttr, err.Error()+".")}
			}
			s.Keys = k
		default:
			return false, hcl.Diagnostics{errAt(b.Range, "Missing keys", fmt.Sprintf("%s needs %s or passphrase = env(\"PIPE_PASSPHRASE\"); `pipe keygen` creates a key pair.", b.Type, example))}
		}
		return true, nil
	}
}

// describeKeys describes an age stage whose keys are called what.
func describeKeys(what string) func(*Stage) string {
	return func(s *Stage) string {
		switch {
		case len(s.Keys.Fingerprints) == 0:
			return "age, keys known at run time"
		case s.Keys.Passphrase() && s.Kind().Encodes() && s.writesRunKey:
			return "age, passphrase: the objects to a key of the run's own, that key to the passphrase (one scrypt per run)"
		case s.Keys.Passphrase():
			return "age, passphrase (one scrypt per stream)"
		}
		return fmt.Sprintf("age, %s (%s)", Plural(len(s.Keys.Fingerprints), what), strings.Join(s.Keys.Fingerprints, ", "))
	}
}

// Kind is the stage's kind.
func (s *Stage) Kind() *stagekind.Kind { return stagekind.Lookup(s.Type) }

func (s *Stage) ops() ops { return kindOps[s.Kind()] }

// Encodes reports whether the stage writes a stored form (compress,
// encrypt) rather than reading one back (decompress, decrypt).
func (s *Stage) Encodes() bool { return s.Kind().Encodes() }

// Decodes reports whether the stage reads a stored form back.
func (s *Stage) Decodes() bool { return s.Kind().Decodes() }

// Idle reports whether the stage leaves the bytes as they are and runs
// nothing (compress or decompress with codec "none").
func (s *Stage) Idle() bool { return s.absorbed || s.ops().idle != nil && s.ops().idle(s) }

// Ext is the extension an encoding stage adds to stream names.
func (s *Stage) Ext() string {
	if !s.Encodes() || s.Idle() {
		return ""
	}
	return s.ops().ext(s)
}

// MaxOut bounds what the stage makes of n bytes in: -1 when not known
// (n < 0, or a decoding stage, whose output its input does not bound).
func (s *Stage) MaxOut(n int64) int64 {
	switch {
	case n < 0 || s.Decodes():
		return -1
	case s.Encodes() && !s.Idle():
		return s.ops().maxOut(s, n)
	}
	return n
}

// KeepsSize reports whether the stage outputs exactly the bytes it reads
// (checksum; a codec of "none").
func (s *Stage) KeepsSize() bool { return s.Kind().Direction == stagekind.Observes || s.Idle() }

// Strip takes a decoding stage's extension off a stream's name (stream is
// the source's name, for messages) and returns the codec it found when the
// stage's codec is "auto"; other stages return name as it is.
func (s *Stage) Strip(name, stream string) (rest, codec string, err error) {
	if !s.Decodes() || s.Idle() {
		return name, "", nil
	}
	return s.ops().strip(s, name, stream)
}

// describe says what the stage does, for plans.
func (s *Stage) describe() string {
	if s.absorbed {
		return s.ops().describe(s) + ": each chunk dedup stores"
	}
	return s.ops().describe(s)
}

// fromProfile marks a setting the profile gave.
func (s *Stage) fromProfile(attr string) string {
	if s.Explicit[attr] {
		return ""
	}
	return " (profile)"
}
