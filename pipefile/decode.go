package pipefile

import (
	"fmt"
	"math/big"
	"time"

	"github.com/agext/levenshtein"
	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"

	"github.com/pipebackup/pipe/plugins/sdk"
)

type functionT = function.Function

// sensitiveMark marks values that came from a sensitive variable.
const sensitiveMark = "sensitive"

// decodeBlock decodes blk, whose body holds only attributes of schema,
// as decodeAttributes does; what names it in diagnostics.
func (f *File) decodeBlock(blk *hcl.Block, what string, schema []sdk.Attribute, keyName string, ectx *hcl.EvalContext, src []byte) (*Block, hcl.Diagnostics) {
	content, diags := blk.Body.Content(&hcl.BodySchema{Attributes: attributeSchema(schema, "")})
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
		return nil, false, append(diags, attrDiag(attr, "Sensitive value in a name",
			fmt.Sprintf("%q becomes part of stream or object names, which are printed in plans and summaries and stored in manifests: it cannot hold a sensitive value. Use a value that is not secret here.", a.Name)))
	}
	if !val.IsWhollyKnown() {
		return nil, false, append(diags, f.unsetUses(attr.Expr)...)
	}
	if val.IsNull() {
		if a.Required {
			return nil, false, append(diags, attrDiag(attr, "Missing value", fmt.Sprintf("%q is required and cannot be null.", a.Name)))
		}
		return a.Default, true, diags
	}
	v, d := goValue(a, attr, val)
	diags = append(diags, d...)
	if d.HasErrors() {
		return nil, false, diags
	}
	if d := checkDecoded(a, attr, v); d != nil {
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

// checkDecoded checks v, the decoded value of attr, against what a asks
// of it beyond its type: a valid stream name, a required value not empty.
func checkDecoded(a sdk.Attribute, attr *hcl.Attribute, v any) *hcl.Diagnostic {
	if name, ok := v.(string); ok && a.StreamName {
		if err := sdk.CheckStreamName(name); err != nil {
			return attrDiag(attr, "Invalid stream name", err.Error()+".")
		}
	}
	if a.Required && empty(v) {
		return attrDiag(attr, "Empty value", fmt.Sprintf("%q is required and cannot be empty.", a.Name))
	}
	return nil
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

func attrDiag(attr *hcl.Attribute, summary, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: attr.Expr.Range().Ptr()}
}

// goValue converts val to the Go type of a's Type.
func goValue(a sdk.Attribute, attr *hcl.Attribute, val cty.Value) (any, hcl.Diagnostics) {
	switch a.Type {
	case sdk.String:
		v, err := convert.Convert(val, cty.String)
		if err != nil {
			return nil, typeErr(a, attr, val, "a string")
		}
		return v.AsString(), nil
	case sdk.Bool:
		v, err := convert.Convert(val, cty.Bool)
		if err != nil {
			return nil, typeErr(a, attr, val, "a bool (true or false)")
		}
		return v.True(), nil
	case sdk.Number:
		v, err := convert.Convert(val, cty.Number)
		if err != nil {
			return nil, typeErr(a, attr, val, "a number")
		}
		return wholeNumber(a.Name, attr, v.AsBigFloat())
	case sdk.Size:
		return sizeValue(a, attr, val)
	case sdk.Duration:
		return durationValue(a, attr, val)
	case sdk.StringList:
		return stringListValue(a, attr, val)
	case sdk.StringMap:
		return stringMapValue(a, attr, val)
	}
	return nil, hcl.Diagnostics{attrDiag(attr, "Unsupported attribute type", fmt.Sprintf("The endpoint declares %q with unknown type %v.", a.Name, a.Type))}
}

// typeErr reports that val, the value of attr, is not of the type a
// declares, want.
func typeErr(a sdk.Attribute, attr *hcl.Attribute, val cty.Value, want string) hcl.Diagnostics {
	return hcl.Diagnostics{attrDiag(attr, "Incorrect attribute value type",
		fmt.Sprintf("Inappropriate value for attribute %q: %s required, got %s.", a.Name, want, friendlyType(val.Type())))}
}

// sizeValue converts val to a size in bytes: a whole number, or a string
// such as "8MiB".
func sizeValue(a sdk.Attribute, attr *hcl.Attribute, val cty.Value) (any, hcl.Diagnostics) {
	if val.Type() == cty.Number {
		return wholeNumber(a.Name, attr, val.AsBigFloat())
	}
	v, err := convert.Convert(val, cty.String)
	if err != nil {
		return nil, typeErr(a, attr, val, `a size such as "8MiB"`)
	}
	n, warn, err := ParseSize(v.AsString())
	if err != nil {
		return nil, hcl.Diagnostics{attrDiag(attr, "Invalid size", err.Error()+".")}
	}
	var diags hcl.Diagnostics
	if warn != "" {
		d := attrDiag(attr, "Decimal size unit", warn+".")
		d.Severity = hcl.DiagWarning
		diags = append(diags, d)
	}
	if n <= 0 {
		diags = append(diags, attrDiag(attr, "Invalid size", fmt.Sprintf("%s must be larger than zero.", a.Name)))
	}
	return n, diags
}

// durationValue converts val to a time.Duration.
func durationValue(a sdk.Attribute, attr *hcl.Attribute, val cty.Value) (any, hcl.Diagnostics) {
	v, err := convert.Convert(val, cty.String)
	if err != nil {
		return nil, typeErr(a, attr, val, `a duration such as "30s"`)
	}
	d, err := time.ParseDuration(v.AsString())
	if err != nil {
		return nil, hcl.Diagnostics{attrDiag(attr, "Invalid duration", fmt.Sprintf("%q is not a duration; write e.g. \"30s\", \"5m\" or \"1h30m\".", v.AsString()))}
	}
	return d, nil
}

// stringListValue converts val to a []string without null elements.
func stringListValue(a sdk.Attribute, attr *hcl.Attribute, val cty.Value) (any, hcl.Diagnostics) {
	v, err := convert.Convert(val, cty.List(cty.String))
	if err != nil {
		return nil, typeErr(a, attr, val, "a list of strings")
	}
	out := []string{}
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() {
			return nil, hcl.Diagnostics{attrDiag(attr, "Null list element", fmt.Sprintf("%q cannot hold null.", a.Name))}
		}
		out = append(out, e.AsString())
	}
	return out, nil
}

// stringMapValue converts val to a map[string]string without null values.
func stringMapValue(a sdk.Attribute, attr *hcl.Attribute, val cty.Value) (any, hcl.Diagnostics) {
	v, err := convert.Convert(val, cty.Map(cty.String))
	if err != nil {
		return nil, typeErr(a, attr, val, "a map of strings")
	}
	out := map[string]string{}
	for it := v.ElementIterator(); it.Next(); {
		k, e := it.Element()
		if e.IsNull() {
			return nil, hcl.Diagnostics{attrDiag(attr, "Null map value", fmt.Sprintf("%q cannot hold null.", a.Name))}
		}
		out[k.AsString()] = e.AsString()
	}
	return out, nil
}

func wholeNumber(name string, attr *hcl.Attribute, f *big.Float) (any, hcl.Diagnostics) {
	if !f.IsInt() {
		return nil, hcl.Diagnostics{attrDiag(attr, "Invalid number", fmt.Sprintf("%s must be a whole number, not %s.", name, f.Text('g', -1)))}
	}
	n, acc := f.Int64()
	if acc != big.Exact {
		return nil, hcl.Diagnostics{attrDiag(attr, "Invalid number", fmt.Sprintf("%s = %s is far too large.", name, f.Text('g', 6)))}
	}
	return n, nil
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

// friendlyType names a value's type as a user would.
func friendlyType(t cty.Type) string {
	switch {
	case t.IsTupleType() || t.IsListType() || t.IsSetType():
		return "a list"
	case t.IsObjectType() || t.IsMapType():
		return "an object"
	case t == cty.String:
		return "a string"
	case t == cty.Number:
		return "a number"
	case t == cty.Bool:
		return "a bool"
	}
	return t.FriendlyName()
}

// empty reports whether a required value holds nothing.
func empty(v any) bool {
	switch x := v.(type) {
	case string:
		return x == ""
	case []string:
		return len(x) == 0
	case map[string]string:
		return len(x) == 0
	}
	return false
}
