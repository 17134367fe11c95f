package wal

import (
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/wal/walname"
)

// An object's signature sits in its name right after the stored bytes'
// digest (always 64 hex digits, so no separator is needed), before the
// stages' extension: the 64-byte ed25519 signature in unpadded base64url
// (86 characters, letters, digits, - and _: safe in every store's keys).
// A separator would take the longest name a push makes, a backup label's
// with a codec's and age's extensions (232 bytes), past what the fs
// store allows: its temporary name adds 23 bytes, and a path component
// holds at most 255.
var sigEncoding = base64.RawURLEncoding

// signedName is the base name of a file's object, signed with k: the
// signature covers the object's key relative to the archive's root
// without it, dir (the system id's and timeline's folder, see Dir) and the
// unsigned name, after signing.WALObjectDomain.
func signedName(k *signing.PrivateKey, dir, name, fileSum, storedSum, ext string) string {
	sig := k.Sign(signing.WALObjectDomain, []byte(dir+walname.ObjectName(name, fileSum, storedSum, ext)))
	return walname.ObjectName(name, fileSum, storedSum+sigEncoding.EncodeToString(sig), ext)
}

// ErrUntrusted is the error of an object whose name is not signed by a
// key the archive trusts.
var ErrUntrusted = errors.New("not signed by a trusted key")

// checkSignature checks the signature in the name of o, in the folder dir
// (see Dir), against the trusted keys. It returns the fingerprint of the
// key that signed it, or why none did (to wrap in ErrUntrusted).
func checkSignature(o walname.Object, trust signing.Trust, dir string) (string, error) {
	if o.Sig == "" {
		return "", errors.New("its name carries no signature (archived without sign { key }, or by a push without the signing key)")
	}
	sig, err := sigEncoding.DecodeString(o.Sig)
	if err != nil || sigEncoding.EncodeToString(sig) != o.Sig {
		return "", errors.New("the signature in its name does not decode")
	}
	k, ok := trust.Verify(signing.WALObjectDomain, []byte(dir+o.Unsigned()), sig)
	if !ok {
		return "", fmt.Errorf("the signature in its name verifies with none of the trusted keys (%s): forged, moved from another cluster's folder, or signed by a key trust { keys } does not hold",
			strings.Join(trust.Fingerprints(), ", "))
	}
	return k.Fingerprint(), nil
}

// untrusted is why an object is not trusted, for reports.
func untrusted(why error) string { return ErrUntrusted.Error() + ": " + why.Error() }
