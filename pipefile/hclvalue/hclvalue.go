// Package hclvalue turns HCL into the Go values of the plugin SDK's
// attribute types, as a pipeline file gives them: a file's text within the
// bounds the loader accepts, a block's schema, an attribute's value
// (string, bool, number, size, duration, list, map) and the checks beyond
// its type. It is what package pipefile decodes with, and what a reader
// of literal settings needs without the rest of pipefile (pipe-wal).
package hclvalue

import (
	"fmt"
	"math/big"
	"strings"
	"time"
	"unicode"

	"github.com/dustin/go-humanize"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

// Check checks v, the decoded value of attr, against what a asks
// of it beyond its type: a valid stream name, a required value not empty.
func Check(a sdk.Attribute, attr *hcl.Attribute, v any) *hcl.Diagnostic {
	if name, ok := v.(string); ok && a.StreamName {
		if err := sdk.CheckStreamName(name); err != nil {
			return Diag(attr, "Invalid stream name", err.Error()+".")
		}
	}
	if a.Required && empty(v) {
		return Diag(attr, "Empty value", fmt.Sprintf("%q is required and cannot be empty.", a.Name))
	}
	return nil
}

// Diag is an error diagnostic about attr's value.
func Diag(attr *hcl.Attribute, summary, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: attr.Expr.Range().Ptr()}
}

// Decode converts val to the Go type of a's Type.
func Decode(a sdk.Attribute, attr *hcl.Attribute, val cty.Value) (any, hcl.Diagnostics) {
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
	return nil, hcl.Diagnostics{Diag(attr, "Unsupported attribute type", fmt.Sprintf("The endpoint declares %q with unknown type %v.", a.Name, a.Type))}
}

// typeErr reports that val, the value of attr, is not of the type a
// declares, want.
func typeErr(a sdk.Attribute, attr *hcl.Attribute, val cty.Value, want string) hcl.Diagnostics {
	return hcl.Diagnostics{Diag(attr, "Incorrect attribute value type",
		fmt.Sprintf("Inappropriate value for attribute %q: %s required, got %s.", a.Name, want, FriendlyType(val.Type())))}
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
		return nil, hcl.Diagnostics{Diag(attr, "Invalid size", err.Error()+".")}
	}
	var diags hcl.Diagnostics
	if warn != "" {
		d := Diag(attr, "Decimal size unit", warn+".")
		d.Severity = hcl.DiagWarning
		diags = append(diags, d)
	}
	if n <= 0 {
		diags = append(diags, Diag(attr, "Invalid size", fmt.Sprintf("%s must be larger than zero.", a.Name)))
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
		return nil, hcl.Diagnostics{Diag(attr, "Invalid duration", fmt.Sprintf("%q is not a duration; write e.g. \"30s\", \"5m\" or \"1h30m\".", v.AsString()))}
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
			return nil, hcl.Diagnostics{Diag(attr, "Null list element", fmt.Sprintf("%q cannot hold null.", a.Name))}
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
			return nil, hcl.Diagnostics{Diag(attr, "Null map value", fmt.Sprintf("%q cannot hold null.", a.Name))}
		}
		out[k.AsString()] = e.AsString()
	}
	return out, nil
}

// wholeNumber is f as an int64, if it is a whole number that fits.
func wholeNumber(name string, attr *hcl.Attribute, f *big.Float) (any, hcl.Diagnostics) {
	if !f.IsInt() {
		return nil, hcl.Diagnostics{Diag(attr, "Invalid number", fmt.Sprintf("%s must be a whole number, not %s.", name, f.Text('g', -1)))}
	}
	n, acc := f.Int64()
	if acc != big.Exact {
		return nil, hcl.Diagnostics{Diag(attr, "Invalid number", fmt.Sprintf("%s = %s is far too large.", name, f.Text('g', 6)))}
	}
	return n, nil
}

// FriendlyType names a value's type as a user would.
func FriendlyType(t cty.Type) string {
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

// ParseSize reads a byte size such as "8MiB", "512KiB" or "1GiB". SI units
// ("8MB" = 8,000,000 bytes) are accepted with a warning, since chunk and
// part sizes are almost always meant in binary units.
func ParseSize(s string) (n int64, warning string, err error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, "", fmt.Errorf("empty size")
	}
	if !unicode.IsDigit(rune(t[0])) {
		return 0, "", fmt.Errorf("%q is not a size: write a number and a unit, e.g. \"8MiB\"", s)
	}
	v, err := humanize.ParseBytes(t)
	if err != nil {
		return 0, "", fmt.Errorf("%q is not a size: write a number and a unit, e.g. \"8MiB\" (units: B, KiB, MiB, GiB, TiB)", s)
	}
	if v > 1<<50 {
		return 0, "", fmt.Errorf("%q is larger than 1 PiB", s)
	}
	num := strings.TrimRight(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
	unit := strings.ToLower(strings.TrimSpace(t[len(num):]))
	if unit != "" && unit != "b" && !strings.Contains(unit, "i") {
		bin := strings.ToUpper(unit[:1]) + "iB"
		warning = fmt.Sprintf("%q means %s bytes (SI units, powers of 1000); if you meant binary units write %q", s, humanize.Comma(int64(v)), num+bin)
	}
	return int64(v), warning, nil
}

// Schema is the HCL schema of attrs, without the attribute skip.
func Schema(attrs []sdk.Attribute, skip string) []hcl.AttributeSchema {
	out := make([]hcl.AttributeSchema, 0, len(attrs))
	for _, a := range attrs {
		if a.Name == skip {
			continue
		}
		out = append(out, hcl.AttributeSchema{Name: a.Name, Required: a.Required})
	}
	return out
}

// What the loader accepts. A pipeline file of the largest fleet is a few
// thousand tokens, nested a handful of levels; HCL's parser and evaluator
// recurse once per level, so a file of 60,000 "[" ran Go out of stack and a
// 90 KB chain of templates took 800 MB. These bounds leave real files
// untouched and turn hostile ones into a diagnostic.
const (
	// MaxFileSize bounds a pipeline file in bytes.
	MaxFileSize = 1 << 20
	// MaxTokens bounds a file's tokens.
	MaxTokens = 50_000
	// MaxNesting bounds how deep brackets, braces, parentheses, strings,
	// templates and runs of unary operators (!, -) nest.
	MaxNesting = 64
)

// CheckLimits refuses a file beyond the bounds, before it is parsed; the
// lexer it uses does not recurse.
func CheckLimits(path string, src []byte) hcl.Diagnostics {
	if len(src) > MaxFileSize {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Pipeline file too large",
			Detail:  fmt.Sprintf("%s has %d bytes; a pipeline file may have at most %d. Keep data in files that file() reads.", path, len(src), MaxFileSize),
			Subject: &hcl.Range{Filename: path, Start: hcl.InitialPos, End: hcl.InitialPos}}}
	}
	tokens, _ := hclsyntax.LexConfig(src, path, hcl.InitialPos)
	if len(tokens) > MaxTokens {
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Pipeline file too complex",
			Detail:  fmt.Sprintf("%s has %d tokens; a pipeline file may have at most %d.", path, len(tokens), MaxTokens),
			Subject: tokens[MaxTokens].Range.Ptr()}}
	}
	depth, unary := 0, 0
	for _, t := range tokens {
		switch t.Type {
		case hclsyntax.TokenOBrace, hclsyntax.TokenOBrack, hclsyntax.TokenOParen, hclsyntax.TokenOQuote,
			hclsyntax.TokenOHeredoc, hclsyntax.TokenTemplateInterp, hclsyntax.TokenTemplateControl:
			depth++
		case hclsyntax.TokenCBrace, hclsyntax.TokenCBrack, hclsyntax.TokenCParen, hclsyntax.TokenCQuote,
			hclsyntax.TokenCHeredoc, hclsyntax.TokenTemplateSeqEnd:
			depth--
		}
		if t.Type == hclsyntax.TokenBang || t.Type == hclsyntax.TokenMinus {
			unary++
		} else {
			unary = 0
		}
		if depth+unary > MaxNesting {
			return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Pipeline file nested too deeply",
				Detail:  fmt.Sprintf("Brackets, strings, templates and operators nest more than %d levels deep here; a pipeline file needs a handful.", MaxNesting),
				Subject: t.Range.Ptr()}}
		}
	}
	return nil
}
