package pipefile

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// The sign and trust blocks of a pipeline or an archive: the key a writer
// signs its runs' manifests (or its WAL objects' names) with, and the
// public keys whose signatures a reader accepts. Their keys are checked
// in plan (package signing reads them).
var (
	signAttrs = []sdk.Attribute{
		{Name: "key", Type: sdk.String, Required: true, Secret: true, Description: `The ed25519 signing key, PEM (PKCS#8): file("keys/signing.key"), which pipe keygen --signing makes. A secret, never printed: the plan shows its public key's fingerprint.`},
	}
	trustAttrs = []sdk.Attribute{
		{Name: "keys", Type: sdk.StringList, Required: true, Description: `Public keys (PEM) whose signatures are accepted: [file("keys/signing.pub")]. A run (or a WAL object) that none of them signed is refused.`},
	}
)

// signingBlocks are the block headers of sign and trust.
var signingBlocks = []hcl.BlockHeaderSchema{{Type: "sign"}, {Type: "trust"}}

// loadSigning decodes a sign or trust block of owner (`pipeline "p"`,
// `archive "a"`) into *dst; a second one of a kind is an error at its
// position.
func (f *File) loadSigning(blk *hcl.Block, owner string, dst **Block, ectx *hcl.EvalContext, src []byte) hcl.Diagnostics {
	if *dst != nil {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Duplicate " + blk.Type + " block",
			Detail: fmt.Sprintf("%s already has a %s block at %s.", owner, blk.Type, pos((*dst).Range)), Subject: blk.DefRange.Ptr()}}
	}
	attrs := signAttrs
	if blk.Type == "trust" {
		attrs = trustAttrs
	}
	b, diags := f.decodeBlock(blk, blk.Type, attrs, "", ectx, src)
	*dst = b
	return diags
}

// ElemRange is the position of element i of a list attribute written as
// a list ([a, b]), else the attribute's (a variable's list).
func (b *Block) ElemRange(name string, i int) hcl.Range {
	a, ok := b.attrs[name]
	if !ok {
		return b.Range
	}
	if exprs, diags := hcl.ExprList(a.Expr); !diags.HasErrors() && i < len(exprs) {
		return exprs[i].Range()
	}
	return a.Expr.Range()
}
