package encrypt

import (
	"errors"
	"fmt"
	"io"

	"filippo.io/age"
)

// NewWriter encrypts what is written to it to the keys' recipients, a
// standard age file written to w as it goes (64 KiB at a time); Close
// ends the file and does not close w.
func NewWriter(k Keys, w io.Writer) (io.WriteCloser, error) {
	return age.Encrypt(w, k.Recipients...)
}

// NewReader decrypts r with the keys' identities as it is read. A read
// error means the data is truncated or was tampered with: what was read
// before it is the caller's to discard.
func NewReader(k Keys, r io.Reader) (io.Reader, error) {
	ar, err := age.Decrypt(r, k.Identities...)
	if err != nil {
		switch {
		case k.scrypt && wrongKey(err):
			return nil, errors.New("wrong passphrase")
		case wrongKey(err):
			return nil, errors.New("none of the identities opens it: it was encrypted to other keys")
		}
		return nil, fmt.Errorf("not a valid age file: %w", err)
	}
	return tamperedReader{ar}, nil
}

// tamperedReader says what a failed read of age's reader means.
type tamperedReader struct{ r io.Reader }

func (t tamperedReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("decryption failed, the data is truncated or was tampered with: %w", err)
	}
	return n, err
}

// StreamMemory is what NewWriter or NewReader holds: age's chunk, its
// ciphertext and the header.
const StreamMemory = 256 << 10
