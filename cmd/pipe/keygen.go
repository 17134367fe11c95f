package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/stages/dedup"
)

func (a *app) keygenCmd() *cobra.Command {
	var out string
	var ifMissing, force, sign, dd bool
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Create an age key pair for encrypt/decrypt, an ed25519 pair for sign/trust (--signing), or a dedup key (--dedup)",
		Long: `keygen writes an X25519 key pair in age's format: PATH.key (the identity,
mode 0600: keep it safe and apart from the backups, it is the only way to
restore them) and PATH.pub (the recipient, for encrypt { recipients }).

With --signing it writes an ed25519 signing key pair instead, as PEM files
openssl reads (default PATH keys/signing): PATH.key (PKCS#8, mode 0600,
for sign { key }: it stays with whatever writes the backups) and PATH.pub
(PKIX, for trust { keys } where backups are restored and verified).

With --dedup it writes a deduplication key (default PATH keys/dedup):
PATH.key, mode 0600, for dedup { key }. It stays with whatever writes the
backups; restores do not need it. Runs share chunks only under one key.

It never overwrites a private key unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if sign && dd {
				return fmt.Errorf("--signing and --dedup write different keys: give one")
			}
			if sign && !cmd.Flags().Changed("out") {
				out = "keys/signing"
			}
			if dd && !cmd.Flags().Changed("out") {
				out = "keys/dedup"
			}
			keyPath, pubPath := out+".key", out+".pub"
			if _, err := os.Stat(keyPath); err == nil {
				if ifMissing {
					fmt.Fprintf(a.stdout, "%s exists; keeping it\n", keyPath)
					return nil
				}
				if !force {
					why := "Backups encrypted to it need it to be restored"
					if sign {
						why = "Restores trust what it signed by its public key, and a new key's runs need the new public key in their trust { keys }"
					}
					if dd {
						why = "Runs under a new key share no chunk with the runs before it"
					}
					fmt.Fprintf(a.stderr, "Error: %s exists. %s: keep it, or pass --force to replace it.\n", keyPath, why)
					return &exitError{exitFailed}
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
			if sign {
				return a.signingKeygen(keyPath, pubPath)
			}
			if dd {
				return a.dedupKeygen(keyPath)
			}
			id, err := age.GenerateX25519Identity()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
				return err
			}
			pub := id.Recipient().String()
			key := fmt.Sprintf("# created: %s\n# public key: %s\n%s\n", time.Now().UTC().Format(time.RFC3339), pub, id.String())
			if err := writeFileAtomic(keyPath, []byte(key), 0o600); err != nil {
				return err
			}
			if err := writeFileAtomic(pubPath, []byte(pub+"\n"), 0o644); err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "wrote %s (secret, keep it apart from the backups) and %s\npublic key: %s\n", keyPath, pubPath, pub)
			return nil
		},
	}
	cmd.Flags().StringVarP(&out, "out", "o", "keys/backup", "path prefix: writes PATH.key and PATH.pub")
	cmd.Flags().BoolVar(&ifMissing, "if-missing", false, "do nothing if PATH.key exists")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing key pair")
	cmd.Flags().BoolVar(&dd, "dedup", false, "write a deduplication key for dedup { key }; PATH defaults to keys/dedup")
	cmd.Flags().BoolVar(&sign, "signing", false, "write an ed25519 signing key pair (PEM) for sign { key } and trust { keys }; PATH defaults to keys/signing")
	return cmd
}

// signingKeygen writes an ed25519 signing key pair: keyPath (PKCS#8 PEM,
// mode 0600) and pubPath (PKIX PEM).
func (a *app) signingKeygen(keyPath, pubPath string) error {
	k, err := signing.Generate()
	if err != nil {
		return err
	}
	priv, err := k.PEM()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, priv, 0o600); err != nil {
		return err
	}
	if err := writeFileAtomic(pubPath, k.Public().PEM(), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "wrote %s (secret, for sign { key }: keep it only where backups are written) and %s (for trust { keys } where they are restored)\nfingerprint: %s\n", keyPath, pubPath, k.Fingerprint())
	return nil
}

// dedupKeygen writes a deduplication key at keyPath (mode 0600).
func (a *app) dedupKeygen(keyPath string) error {
	text, err := dedup.NewKeyFile()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(keyPath), 0o700); err != nil {
		return err
	}
	if err := writeFileAtomic(keyPath, []byte(text), 0o600); err != nil {
		return err
	}
	k, err := dedup.ParseKey(text)
	if err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "wrote %s (secret, for dedup { key }: keep it where backups are written, and a copy)\ncheck: %s\n", keyPath, k.Check())
	return nil
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
