package pipefile

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/ext/typeexpr"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
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
		if d := checkVariableName(b, name, declared); d != nil {
			diags = append(diags, d)
			continue
		}
		declared[name] = true
		// A variable that fails holds an unknown value, so its uses do not
		// fail a second time.
		vals[name] = cty.DynamicVal
		v, vd := f.loadVariable(b, name, o, fctx)
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
	return vals, append(diags, f.undeclaredVars(o, declared)...)
}

// checkVariableName reports a variable block whose name is invalid or
// already declared.
func checkVariableName(b *hcl.Block, name string, declared map[string]bool) *hcl.Diagnostic {
	if !hclsyntax.ValidIdentifier(name) {
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid variable name",
			Detail: fmt.Sprintf("%q is not a valid name: use letters, digits, _ and -, starting with a letter.", name), Subject: b.LabelRanges[0].Ptr()}
	}
	if declared[name] {
		return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate variable",
			Detail: fmt.Sprintf("Variable %q is declared twice.", name), Subject: b.LabelRanges[0].Ptr()}
	}
	return nil
}

// loadVariable reads one variable block: its type, description and
// sensitivity, then its value. The diagnostics are this variable's
// problems; with an error among them, the variable is not usable.
func (f *File) loadVariable(b *hcl.Block, name string, o *Options, fctx *hcl.EvalContext) (*Variable, hcl.Diagnostics) {
	content, vd := b.Body.Content(variableSchema)
	v := &Variable{Name: name, Range: b.DefRange, Value: cty.NilVal}
	ty, d := variableType(content)
	vd = append(vd, d...)
	vd = append(vd, v.readDescription(content)...)
	vd = append(vd, v.readSensitive(content)...)
	// An override beats the default.
	if raw, ok := o.variableOverride(name); ok {
		val, err := parseOverride(raw, ty)
		if err != nil {
			return v, append(vd, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid value for variable",
				Detail: fmt.Sprintf("The value given for var.%s does not fit its type %s: %v.", name, ty.FriendlyName(), err), Subject: b.DefRange.Ptr()})
		}
		v.Value = val
		return v, vd
	}
	a, ok := content.Attributes["default"]
	if !ok {
		// Unknown until a run gives it a value: validate and plan go on
		// (a CI job without the secrets can check a file), and a run
		// fails where a pipeline it runs uses it.
		v.Value, v.Unset = cty.UnknownVal(ty), true
		f.unset[name] = v
		return v, vd
	}
	v.Value, vd = defaultValue(a, ty, fctx, vd)
	return v, vd
}

// variableType reads a variable's type constraint; without one (or with
// an invalid one), any type.
func variableType(content *hcl.BodyContent) (cty.Type, hcl.Diagnostics) {
	a, ok := content.Attributes["type"]
	if !ok {
		return cty.DynamicPseudoType, nil
	}
	t, d := typeexpr.TypeConstraint(a.Expr)
	if d.HasErrors() {
		return cty.DynamicPseudoType, d
	}
	return t, d
}

// readDescription sets v's description from its block, if it is a string.
func (v *Variable) readDescription(content *hcl.BodyContent) hcl.Diagnostics {
	a, ok := content.Attributes["description"]
	if !ok {
		return nil
	}
	dv, d := a.Expr.Value(nil)
	if !d.HasErrors() && dv.Type() == cty.String && dv.IsKnown() && !dv.IsNull() {
		v.Description = dv.AsString()
	}
	return d
}

// readSensitive sets v's sensitivity from its block.
func (v *Variable) readSensitive(content *hcl.BodyContent) hcl.Diagnostics {
	a, ok := content.Attributes["sensitive"]
	if !ok {
		return nil
	}
	sv, d := a.Expr.Value(nil)
	if d.HasErrors() {
		return d
	}
	if sv.Type() != cty.Bool || sv.IsNull() {
		return append(d, hclvalue.Diag(a, "Incorrect attribute value type", "sensitive must be true or false."))
	}
	v.Sensitive = sv.True()
	return d
}

// variableOverride returns the value --var name=… or PIPE_VAR_name gives
// a variable, the flag first.
func (o *Options) variableOverride(name string) (string, bool) {
	if raw, ok := o.Vars[name]; ok {
		return raw, true
	}
	return o.lookupEnv("PIPE_VAR_" + name)
}

// defaultValue evaluates a variable's default a, of type ty, appending
// its problems to vd, the variable's problems so far: with an error among
// them the default is not evaluated, and the value is cty.NilVal.
func defaultValue(a *hcl.Attribute, ty cty.Type, fctx *hcl.EvalContext, vd hcl.Diagnostics) (cty.Value, hcl.Diagnostics) {
	for _, tr := range a.Expr.Variables() {
		vd = append(vd, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Variables not allowed",
			Detail: "A variable's default cannot refer to other values; functions such as env() are fine.", Subject: tr.SourceRange().Ptr()})
	}
	if vd.HasErrors() {
		return cty.NilVal, vd
	}
	val, d := a.Expr.Value(fctx)
	vd = append(vd, d...)
	if d.HasErrors() {
		return cty.NilVal, vd
	}
	cv, err := convert.Convert(val, ty)
	if err != nil {
		return cty.NilVal, append(vd, hclvalue.Diag(a, "Invalid default value for variable", fmt.Sprintf("The default does not fit the type %s: %v.", ty.FriendlyName(), err)))
	}
	return cv, vd
}

// undeclaredVars reports each --var that names no declared variable.
func (f *File) undeclaredVars(o *Options, declared map[string]bool) hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, name := range slices.Sorted(maps.Keys(o.Vars)) {
		if !declared[name] {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "No such variable",
				Detail: fmt.Sprintf("--var %s=… names no variable declared in %s; declare it with variable %q { }.", name, f.Path, name)})
		}
	}
	return diags
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
