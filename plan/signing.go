package plan

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/signing"
)

// resolveSigning reads a sign block's key and a trust block's keys (each
// nil when there is no block, or its value is known at run time only).
// A key that is not one is an error at its position, which never quotes
// the key.
func resolveSigning(sign, trust *pipefile.Block) (*signing.PrivateKey, signing.Trust, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	var key *signing.PrivateKey
	if sign != nil && sign.Has("key") && !sign.Unknown["key"] {
		k, err := signing.ParsePrivateKey([]byte(sign.String("key")))
		if err != nil {
			diags = append(diags, errAt(sign.AttrRange("key"), "Invalid signing key", err.Error()+"."))
		}
		key = k
	}
	var tr signing.Trust
	if trust != nil && trust.Has("keys") && !trust.Unknown["keys"] {
		texts := trust.Strings("keys")
		for i, text := range texts {
			if _, err := signing.ParsePublicKeys([]byte(text)); err != nil {
				where := ""
				if len(texts) > 1 {
					where = fmt.Sprintf("key %d: ", i+1)
				}
				diags = append(diags, errAt(trust.ElemRange("keys", i), "Invalid trusted key", where+err.Error()+"."))
			}
		}
		if !diags.HasErrors() {
			t, err := signing.ParseTrust(texts)
			if err != nil {
				diags = append(diags, errAt(trust.AttrRange("keys"), "Invalid trusted keys", err.Error()+"."))
			}
			tr = t
		}
	}
	return key, tr, diags
}

// resolveSigning takes the pipeline's sign and trust blocks: sign only
// where a run stores (a backup, a copy: it signs their manifests).
func (p *Pipeline) resolveSigning() hcl.Diagnostics {
	def := p.Def
	key, tr, diags := resolveSigning(def.Sign, def.Trust)
	p.Sign, p.Trust = key, tr
	if def.Sign != nil && !p.WritesManifest() {
		what := "no sink keeps runs (a storage sink with a path)"
		if p.Restores() {
			what = "it restores"
		}
		diags = append(diags, errAt(def.Sign.Range, "Nothing to sign",
			fmt.Sprintf("Pipeline %q stores no run (%s): sign signs the manifest a backup or a copy writes. Put it in the pipeline that writes the runs, and trust { keys } in the one that restores them.", p.Name, what)))
	}
	return diags
}

// describeSign says what a sign block does, for plans: its key is a
// secret, its fingerprint is not.
func describeSign(k *signing.PrivateKey, what string) string {
	if k == nil {
		return "key = (sensitive), known at run time: " + what
	}
	return fmt.Sprintf("key = (sensitive), %s: %s", k.Fingerprint(), what)
}

// describeTrust says what a trust block does, for plans.
func describeTrust(def *pipefile.Block, tr signing.Trust, what string) string {
	if tr == nil && def != nil {
		return "keys known at run time: " + what
	}
	return fmt.Sprintf("%s (%s): %s", Plural(len(tr), "key"), joinFingerprints(tr), what)
}

func joinFingerprints(tr signing.Trust) string { return strings.Join(tr.Fingerprints(), ", ") }

// fingerprint is a sign block's key's fingerprint for --json, "" without.
func fingerprint(k *signing.PrivateKey) string {
	if k == nil {
		return ""
	}
	return k.Fingerprint()
}
