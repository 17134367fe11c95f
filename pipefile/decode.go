package pipefile

import (
	"fmt"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plugins/sdk"
)

type functionT = function.Function

// sensitiveMark marks values that came from a sensitive variable.
const sensitiveMark = "sensitive"

// decodeBlock decodes blk, whose body holds only attributes of schema,
// as decodeAttributes does; what names it in diagnostics.
func (f *File) decodeBlock(blk *hcl.Block, what string, schema []sdk.Attribute, keyName string, ectx *hcl.EvalContext, src []byte) (*Block, hcl.Diagnostics) {
	content, diags := blk.Body.Content(&hcl.BodySchema{Attributes: hclvalue.Schema(schema, "")})
	b, d := f.decodeAttributes(what, blk.DefRange, content.Attributes, schema, keyName, ectx, src)
	return b, append(diags, d...)
}

// decodeAttributes turns a block's attributes into Go values of the types
// the schema declares, with defaults, recording positions and secrets.
// keyName is a sink's key attribute: it is left to the KeyTemplate.
func (f *File) decodeAttributes(what string, rng hcl.Range, attrs hcl.Attributes, schema []sdk.Attribute, keyName string, ectx *hcl.EvalContext, src []byte) (*Block, hcl.Diagnostics) {
	b := &Block{Type: what, Range: rng, Values: map[string]any{}, Unknown: map[string]bool{}, Sensitive: map[string]bool{}, attrs: attrs, src: src}
	var diags hcl.Diagnostics
	for _, a := range schema {
		if a.Secret {
			b.Sensitive[a.Name] = true
		}
		attr, ok := attrs[a.Name]
		if !ok || a.Name == keyName {
			if a.Default != nil && a.Name != keyName {
				b.Values[a.Name] = a.Default
			}
			continue
		}
		// A value that fails to decode (or is known at run time only) is
		// unknown: later checks of the block do not fail a second time
		// because of it, and every other attribute is still checked.
		v, ok, d := f.decodeAttribute(b, a, attr, keyName, ectx)
		diags = append(diags, d...)
		if !ok {
			b.Unknown[a.Name] = true
			continue
		}
		if v == nil {
			continue
		}
		b.Values[a.Name] = v
		if b.Sensitive[a.Name] {
			f.addSecrets(v)
		}
	}
	return b, diags
}

// decodeAttribute decodes attr, declared as a, into the Go value of a's
// type, marking it sensitive in b if its value comes from a sensitive
// variable. ok is false when the value is unknown: it failed to decode or
// is known at run time only. keyName is as for decodeAttributes.
func (f *File) decodeAttribute(b *Block, a sdk.Attribute, attr *hcl.Attribute, keyName string, ectx *hcl.EvalContext) (any, bool, hcl.Diagnostics) {
	if d := streamUses(attr, keyName); d.HasErrors() {
		return nil, false, d
	}
	val, diags := attr.Expr.Value(ectx)
	if diags.HasErrors() {
		return nil, false, diags
	}
	val, marks := val.UnmarkDeep()
	if _, ok := marks[sensitiveMark]; ok {
		b.Sensitive[a.Name] = true
	}
	if b.Sensitive[a.Name] && !a.Secret && (a.Public || a.StreamName) {
		return nil, false, append(diags, hclvalue.Diag(attr, "Sensitive value in a name",
			fmt.Sprintf("%q becomes part of stream or object names, which are printed in plans and summaries and stored in manifests: it cannot hold a sensitive value. Use a value that is not secret here.", a.Name)))
	}
	if !val.IsWhollyKnown() {
		return nil, false, append(diags, f.unsetUses(attr.Expr)...)
	}
	if val.IsNull() {
		if a.Required {
			return nil, false, append(diags, hclvalue.Diag(attr, "Missing value", fmt.Sprintf("%q is required and cannot be null.", a.Name)))
		}
		return a.Default, true, diags
	}
	v, d := hclvalue.Decode(a, attr, val)
	diags = append(diags, d...)
	if d.HasErrors() {
		return nil, false, diags
	}
	if d := hclvalue.Check(a, attr, v); d != nil {
		return nil, false, append(diags, d)
	}
	return v, true, diags
}

// streamUses reports each use of stream in attr: stream.name and
// stream.ext are known only per stream, in a sink's key attribute keyName.
func streamUses(attr *hcl.Attribute, keyName string) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, tr := range attr.Expr.Variables() {
		if tr.RootName() == "stream" {
			detail := "stream.name and stream.ext are known only per stream, in a sink's object path"
			if keyName != "" {
				detail += fmt.Sprintf(" (here: %s)", keyName)
			}
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError, Summary: "stream is not known here",
				Detail: detail + ".", Subject: tr.SourceRange().Ptr(),
			})
		}
	}
	return diags
}

// unsetUses reports, in a run, each variable without a value that expr
// uses: a run cannot go on without it. At validate and plan it reports
// nothing (the value is unknown, as ${run.id} is).
func (f *File) unsetUses(expr hcl.Expression) hcl.Diagnostics {
	if !f.running {
		return nil
	}
	var diags hcl.Diagnostics
	for _, tr := range expr.Variables() {
		if tr.RootName() != "var" || len(tr) < 2 {
			continue
		}
		at, ok := tr[1].(hcl.TraverseAttr)
		if !ok {
			continue
		}
		if v := f.unset[at.Name]; v != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Variable not set",
				Detail:  fmt.Sprintf("var.%s (declared at %s) has no default and no value, and this pipeline uses it: give it with --var %s=… or the environment variable PIPE_VAR_%s.", at.Name, pos(v.Range), at.Name, at.Name),
				Subject: tr.SourceRange().Ptr()})
		}
	}
	return diags
}

func (f *File) addSecrets(v any) {
	for _, s := range sdk.SecretStrings(v) {
		f.secrets[s] = true
	}
}

// suggest returns the candidate closest to s, if it is close: at most one
// edit in three characters, so "s3" suggests nothing but "fz" suggests "fs".
func suggest(s string, candidates []string) string {
	best, dist := "", max(1, len(s)/3)+1
	for _, c := range candidates {
		if d := levenshtein.Distance(s, c, nil); d < dist {
			best, dist = c, d
		}
	}
	return best
}
