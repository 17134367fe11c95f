package encrypt

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"filippo.io/age"
)

// Seal encrypts plain to the keys' recipients: a standard age file, for
// objects small enough to hold in memory (a WAL segment). It writes into
// dst's storage when its capacity is MaxStored(len(plain)), else into a
// new buffer.
func Seal(k Keys, dst, plain []byte) ([]byte, error) {
	b := bytes.NewBuffer(dst[:0])
	b.Grow(int(MaxStored(int64(len(plain)))))
	w, err := age.Encrypt(b, k.Recipients...)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(plain); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Open decrypts sealed with the keys' identities, refusing output of more
// than limit bytes.
func Open(k Keys, sealed []byte, limit int64) ([]byte, error) {
	r, err := age.Decrypt(bytes.NewReader(sealed), k.Identities...)
	if err != nil {
		switch {
		case k.scrypt && wrongKey(err):
			return nil, errors.New("wrong passphrase")
		case wrongKey(err):
			return nil, errors.New("none of the identities opens it: it was encrypted to other keys")
		}
		return nil, fmt.Errorf("not a valid age file: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("decryption failed, the data is truncated or was tampered with: %w", err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("it decrypts to more than %d bytes", limit)
	}
	return b, nil
}
