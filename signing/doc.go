// Package signing is what lets a restore trust only the runs and WAL its
// owner wrote: ed25519 keys kept as PEM files, a key's fingerprint, and
// the two things pipe signs.
//
// Keys are the formats openssl reads: a private key is PKCS#8 ("-----BEGIN
// PRIVATE KEY-----"), a public key PKIX ("-----BEGIN PUBLIC KEY-----"). A
// key's fingerprint is "ed25519:" and the hex SHA-256 of its raw 32-byte
// public key.
//
// Every signature covers a domain string followed by the signed bytes, so
// that a signature made for one purpose never passes for another.
//
// A manifest's signature (ManifestDomain) covers its bytes as pipe writes
// them unsigned (manifest.Marshal). The signed manifest is those bytes with
// one member added, last, on one line, in place of the final "\n}\n":
//
//	,\n  "signature": {"key": "ed25519:<hex>", "ed25519": "<base64>"}\n}\n
//
// Verification strips exactly that trailer from the bytes read, rebuilds
// the unsigned bytes and checks them; it never encodes the manifest again,
// and refuses any other form. openssl checks it by hand (docs/security.md).
//
// A WAL object's signature (WALObjectDomain) covers its key in the archive
// without the signature, "<system id>/<timeline>/<name>-<file
// digest>-<stored digest><ext>"; the name holds the signature after the
// stored digest (the layout is package wal's). The name carries the
// SHA-256 of the stored bytes, which fetch checks, so the signature
// authenticates the content with no request more.
//
// A signature proves which key wrote a run or an object. It does not say a
// run is the newest, nor keep anyone who holds the store's credentials from
// deleting it (object lock does), and whoever holds the private key can
// sign anything.
//
// It must not import anything of pipe: manifest, wal, plan and runner use
// it, and it knows none of them.
package signing
