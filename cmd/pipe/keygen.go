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
)

func (a *app) keygenCmd() *cobra.Command {
	var out string
	var ifMissing, force bool
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Create an age key pair for encrypt/decrypt",
		Long: `keygen writes an X25519 key pair in age's format: PATH.key (the identity,
mode 0600: keep it safe and apart from the backups, it is the only way to
restore them) and PATH.pub (the recipient, for encrypt { recipients }).
It never overwrites an identity unless --force.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			keyPath, pubPath := out+".key", out+".pub"
			if _, err := os.Stat(keyPath); err == nil {
				if ifMissing {
					fmt.Fprintf(a.stdout, "%s exists; keeping it\n", keyPath)
					return nil
				}
				if !force {
					fmt.Fprintf(a.stderr, "Error: %s exists. Backups encrypted to it need it to be restored: keep it, or pass --force to replace it.\n", keyPath)
					return &exitError{exitFailed}
				}
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
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
	return cmd
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
