// Package encrypt provides the encrypt and decrypt stages with age
// (filippo.io/age): X25519 recipients and identities, or a passphrase. The
// stored stream is a standard .age file that the age tool opens.
//
// Key material never appears in errors, plans or manifests; recipients are
// identified by fingerprint. It must not import a plugin or the CLI.
package encrypt
