package dedup

import (
	"bytes"
	"fmt"

	"filippo.io/age"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
)

// Format is how a store's chunks are sealed: the codec and level each is
// compressed with (Codec nil: stored as is) and the keys each is encrypted
// to (none: in clear).
type Format struct {
	Codec *compress.Codec
	Level int
	Keys  encrypt.Keys
}

// Check says why chunks cannot be sealed or opened in this format.
func (f Format) Check() error {
	if f.Codec != nil {
		if _, ok, err := f.Codec.FrameDecoder(); err != nil || !ok {
			return fmt.Errorf("deduplicated chunks are compressed with zstd or not at all, not %s", f.Codec.Name)
		}
	}
	if f.Keys.Passphrase() {
		return fmt.Errorf("deduplicated chunks are encrypted to recipients (encrypt { recipients = … }), not a passphrase: every chunk would need its own key derivation")
	}
	return nil
}

// Sealer turns chunks into blobs: one zstd frame, then one age file. One
// goroutine uses it at a time.
type Sealer struct {
	enc        engine.Worker
	recipients []age.Recipient
	z          []byte
	out        bytes.Buffer
}

// NewSealer returns a sealer of the format.
func (f Format) NewSealer() (*Sealer, error) {
	s := &Sealer{recipients: f.Keys.Recipients}
	if f.Codec != nil {
		enc, err := f.Codec.Encoder(f.Level)
		if err != nil {
			return nil, err
		}
		s.enc = enc
	}
	return s, nil
}

// Seal returns the blob of plain, valid until the next call.
func (s *Sealer) Seal(plain []byte) ([]byte, error) {
	b := plain
	if s.enc != nil {
		if need := compress.Bound(len(plain)); cap(s.z) < need {
			s.z = make([]byte, 0, need)
		}
		z, err := s.enc.Map(s.z[:0], plain)
		if err != nil {
			return nil, fmt.Errorf("compressing a chunk: %w", err)
		}
		b = z
	}
	if len(s.recipients) == 0 {
		return b, nil
	}
	s.out.Reset()
	w, err := age.Encrypt(&s.out, s.recipients...)
	if err != nil {
		return nil, fmt.Errorf("encrypting a chunk: %w", err)
	}
	if _, err := w.Write(b); err != nil {
		return nil, fmt.Errorf("encrypting a chunk: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encrypting a chunk: %w", err)
	}
	return s.out.Bytes(), nil
}

// Opener turns blobs back into chunks. One goroutine uses it at a time.
type Opener struct {
	dec  engine.Worker
	keys encrypt.Keys
	z    bytes.Buffer
}

// NewOpener returns an opener of the format; its keys are identities.
func (f Format) NewOpener() (*Opener, error) {
	o := &Opener{keys: f.Keys}
	if f.Codec != nil {
		dec, ok, err := f.Codec.FrameDecoder()
		if err != nil || !ok {
			return nil, fmt.Errorf("a %s decoder: %v", f.Codec.Name, err)
		}
		o.dec = dec
	}
	return o, nil
}

// Open decodes blob into dst, whose capacity is the chunk's size, and
// returns the chunk.
func (o *Opener) Open(dst, blob []byte) ([]byte, error) {
	b := blob
	if len(o.keys.Identities) > 0 {
		r, err := o.keys.Open(bytes.NewReader(blob))
		if err != nil {
			return nil, err
		}
		o.z.Reset()
		if _, err := o.z.ReadFrom(r); err != nil {
			return nil, fmt.Errorf("decryption failed, the blob is truncated or was tampered with: %w", err)
		}
		b = o.z.Bytes()
	}
	if o.dec == nil {
		if len(b) != cap(dst) {
			return nil, fmt.Errorf("the chunk holds %d bytes, its list says %d", len(b), cap(dst))
		}
		return append(dst[:0], b...), nil
	}
	out, err := o.dec.Map(dst[:0], b)
	if err != nil {
		return nil, err
	}
	if len(out) != cap(dst) || (len(out) > 0 && &out[0] != &dst[:1][0]) {
		return nil, fmt.Errorf("the chunk decodes to %d bytes or more, its list says %d", len(out), cap(dst))
	}
	return out, nil
}
