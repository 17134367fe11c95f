package checksum

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"strings"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// Algorithm is the digest's name as digests are written: "sha256:<hex>".
const Algorithm = "sha256"

// Stage returns the checksum stage.
func Stage() engine.Stage {
	return engine.Stage{Name: stagekind.Checksum.Name, Label: Algorithm, Proc: observer{}, Memory: 512}
}

type observer struct{}

func (observer) Observe(string) engine.Observation { return &digest{h: sha256.New()} }

type digest struct {
	h    hash.Hash
	want string
	what string
}

func (d *digest) Write(p []byte) (int, error) { return d.h.Write(p) }

func (d *digest) Finish() (string, error) {
	got := Algorithm + ":" + hex.EncodeToString(d.h.Sum(nil))
	if d.want != "" && got != d.want {
		return got, fmt.Errorf("%s does not match its recorded digest: the stored bytes hash to %s, the manifest says %s; the object is corrupt or was tampered with", d.what, got, d.want)
	}
	return got, nil
}

// Verify returns an observation that fails at the end of the stream unless
// the bytes hash to want. what names the object in the error.
func Verify(want, what string) (engine.Observation, error) {
	if !strings.HasPrefix(want, Algorithm+":") {
		return nil, fmt.Errorf("%s: unsupported digest %q (want %s:<hex>)", what, want, Algorithm)
	}
	return &digest{h: sha256.New(), want: want, what: what}, nil
}
