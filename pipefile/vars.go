package pipefile

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
)

var variableSchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{
		{Name: "default"}, {Name: "type"}, {Name: "description"}, {Name: "sensitive"},
	},
}

// loadVariables evaluates variable blocks: the default, replaced by
// --var name=value or PIPE_VAR_name. Defaults may call functions but not
// refer to other variables.
func (f *File) loadVariables(blocks hcl.Blocks, o *Options, funcs map[string]functionT) (map[string]cty.Value, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	vals := map[string]cty.Value{}
	declared := map[string]bool{}
	fctx := &hcl.EvalContext{Functions: funcs}
	for _, b := range blocks {
		if b.Type != "variable" {
			continue
		}
		name := b.Labels[0]
		if !hclsyntax.ValidIdentifier(name) {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid variable name",
				Detail: fmt.Sprintf("%q is not a valid name: use letters, digits, _ and -, starting with a letter.", name), Subject: b.LabelRanges[0].Ptr()})
			continue
		}
		if declared[name] {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate variable",
				Detail: fmt.Sprintf("Variable %q is declared twice.", name), Subject: b.LabelRanges[0].Ptr()})
			continue
		}
		declared[name] = true
		// A variable that fails holds an unknown value, so its uses do not
		// fail a second time.
		vals[name] = cty.DynamicVal
		var vd hcl.Diagnostics // this variable's problems
		content, d := b.Body.Content(variableSchema)
		vd = append(vd, d...)
		v := &Variable{Name: name, Range: b.DefRange, Value: cty.NilVal}
		ty := cty.DynamicPseudoType
		if a, ok := content.Attributes["type"]; ok {
			t, d := typeexpr.TypeConstraint(a.Expr)
			vd = append(vd, d...)
			if !d.HasErrors() {
				ty = t
			}
		}
		if a, ok := content.Attributes["description"]; ok {
			dv, d := a.Expr.Value(nil)
			vd = append(vd, d...)
			if !d.HasErrors() && dv.Type() == cty.String && dv.IsKnown() && !dv.IsNull() {
				v.Description = dv.AsString()
			}
		}
		if a, ok := content.Attributes["sensitive"]; ok {
			sv, d := a.Expr.Value(nil)
			vd = append(vd, d...)
			if !d.HasErrors() {
				if sv.Type() != cty.Bool || sv.IsNull() {
					vd = append(vd, attrDiag(a, "Incorrect attribute value type", "sensitive must be true or false."))
				} else {
					v.Sensitive = sv.True()
				}
			}
		}
		// An override beats the default.
		raw, overridden := o.Vars[name]
		if !overridden {
			raw, overridden = o.lookupEnv("PIPE_VAR_" + name)
		}
		switch {
		case overridden:
			val, err := parseOverride(raw, ty)
			if err != nil {
				vd = append(vd, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid value for variable",
					Detail: fmt.Sprintf("The value given for var.%s does not fit its type %s: %v.", name, ty.FriendlyName(), err), Subject: b.DefRange.Ptr()})
				diags = append(diags, vd...)
				continue
			}
			v.Value = val
		default:
			a, ok := content.Attributes["default"]
			if !ok {
				// Unknown until a run gives it a value: validate and plan
				// go on (a CI job without the secrets can check a file),
				// and a run fails where a pipeline it runs uses it.
				v.Value, v.Unset = cty.UnknownVal(ty), true
				f.unset[name] = v
				break
			}
			for _, tr := range a.Expr.Variables() {
				vd = append(vd, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Variables not allowed",
					Detail: "A variable's default cannot refer to other values; functions such as env() are fine.", Subject: tr.SourceRange().Ptr()})
			}
			if vd.HasErrors() {
				diags = append(diags, vd...)
				continue
			}
			val, d := a.Expr.Value(fctx)
			vd = append(vd, d...)
			if d.HasErrors() {
				diags = append(diags, vd...)
				continue
			}
			cv, err := convert.Convert(val, ty)
			if err != nil {
				vd = append(vd, attrDiag(a, "Invalid default value for variable", fmt.Sprintf("The default does not fit the type %s: %v.", ty.FriendlyName(), err)))
				diags = append(diags, vd...)
				continue
			}
			v.Value = cv
		}
		diags = append(diags, vd...)
		if vd.HasErrors() {
			continue
		}
		if v.Sensitive {
			f.addSecretValue(v.Value)
			v.Value = v.Value.Mark(sensitiveMark)
		}
		vals[name] = v.Value
		f.Variables = append(f.Variables, v)
	}
	for _, name := range slices.Sorted(maps.Keys(o.Vars)) {
		if !declared[name] {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "No such variable",
				Detail: fmt.Sprintf("--var %s=… names no variable declared in %s; declare it with variable %q { }.", name, f.Path, name)})
		}
	}
	return vals, diags
}

func (f *File) addSecretValue(v cty.Value) {
	if !v.IsKnown() || v.IsNull() {
		return
	}
	switch {
	case v.Type() == cty.String:
		f.addSecrets(v.AsString())
	case v.CanIterateElements():
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			f.addSecretValue(e)
		}
	}
}

// parseOverride reads a --var value: the raw text for strings, a literal
// for numbers and bools, an HCL expression for lists and maps.
func parseOverride(raw string, ty cty.Type) (cty.Value, error) {
	switch ty {
	case cty.String, cty.DynamicPseudoType:
		return cty.StringVal(raw), nil
	case cty.Number, cty.Bool:
		v, err := convert.Convert(cty.StringVal(strings.TrimSpace(raw)), ty)
		if err != nil {
			return cty.NilVal, fmt.Errorf("%q is not a %s", raw, ty.FriendlyName())
		}
		return v, nil
	}
	expr, diags := hclsyntax.ParseExpression([]byte(raw), "<value>", hcl.InitialPos)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("%q is not an HCL value such as [\"a\", \"b\"] or { k = \"v\" }", raw)
	}
	val, diags := expr.Value(nil)
	if diags.HasErrors() {
		return cty.NilVal, fmt.Errorf("%q is not a literal value (no references or functions)", raw)
	}
	return convert.Convert(val, ty)
}
