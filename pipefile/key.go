package pipefile

import (
	"fmt"
	"strings"

	"github.com/pipebackup/pipe/manifest"
	"github.com/pipebackup/pipe/pipefile/hclvalue"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// KeyKind says how a sink's key attribute names objects.
type KeyKind int

const (
	// KeyFolder is a path ending in "/": every stream goes under it as
	// ${stream.name}${stream.ext}.
	KeyFolder KeyKind = iota
	// KeyPerStream mentions ${stream.name} or ${stream.ext} and is rendered
	// for each stream.
	KeyPerStream
	// KeyObject names one object: the source must yield exactly one stream.
	KeyObject
)

// ManifestName is the manifest's base name in a folder.
const ManifestName = manifest.FileName

// KeyTemplate is a sink's object location, rendered per stream.
type KeyTemplate struct {
	Attr string
	Kind KeyKind
	// Text is the expression as written, for plans.
	Text    string
	expr    hcl.Expression
	ectx    *hcl.EvalContext
	preview bool
	runID   string // renders ${run.id} as this, when set (a copied run)
}

// For returns a copy that renders ${run.id} as runID: a copy of a run
// keeps its id in the store it is copied to.
func (k *KeyTemplate) For(runID string) *KeyTemplate {
	c := *k
	c.runID = runID
	return &c
}

// UsesRunID reports whether the key mentions ${run.id}: each run has its
// own objects.
func (k *KeyTemplate) UsesRunID() bool {
	for _, tr := range k.expr.Variables() {
		if tr.RootName() == "run" {
			return true
		}
	}
	return false
}

// Preview returns a copy that renders ${run.id} as a placeholder when the
// run id is not known yet (validate, plan).
func (k *KeyTemplate) Preview() *KeyTemplate {
	c := *k
	c.preview = true
	return &c
}

func (f *File) newKeyTemplate(name string, attr *hcl.Attribute, ectx *hcl.EvalContext, src []byte) (*KeyTemplate, hcl.Diagnostics) {
	k := &KeyTemplate{Attr: name, expr: attr.Expr, ectx: ectx, Text: string(attr.Expr.Range().SliceBytes(src))}
	perStream := false
	for _, tr := range attr.Expr.Variables() {
		if tr.RootName() == "stream" {
			perStream = true
		}
	}
	// Evaluate once with a stand-in run id and stream, to report errors
	// now and to see the shape of the result.
	probe := ectx.NewChild()
	probe.Variables = map[string]cty.Value{
		"run":    cty.ObjectVal(map[string]cty.Value{"id": cty.StringVal("RUNID")}),
		"stream": streamVal("STREAM", ".EXT"),
	}
	val, diags := attr.Expr.Value(probe)
	if diags.HasErrors() {
		return nil, diags
	}
	if !val.IsWhollyKnown() {
		if d := f.unsetUses(attr.Expr); len(d) > 0 {
			return nil, d
		}
	}
	val, marks := val.UnmarkDeep()
	if _, ok := marks[sensitiveMark]; ok {
		return nil, hcl.Diagnostics{hclvalue.Diag(attr, "Sensitive value in an object's name",
			fmt.Sprintf("%s names where objects go; object names are printed in plans and summaries and stored in manifests, so they are never secret: keep sensitive variables out of it.", name))}
	}
	if !val.IsKnown() && !f.running {
		// A variable known at run time only: judge the shape by the text.
		s := strings.TrimSuffix(strings.TrimSpace(k.Text), `"`)
		switch {
		case perStream:
			k.Kind = KeyPerStream
		case strings.HasSuffix(s, "/"):
			k.Kind = KeyFolder
		default:
			k.Kind = KeyObject
		}
		return k, nil
	}
	if val.IsNull() || !val.IsKnown() || val.Type() != cty.String {
		return nil, hcl.Diagnostics{hclvalue.Diag(attr, "Incorrect attribute value type", fmt.Sprintf("%s must be a string path.", name))}
	}
	s := val.AsString()
	switch {
	case s == "":
		return nil, hcl.Diagnostics{hclvalue.Diag(attr, "Empty path", fmt.Sprintf("%s is empty: name a folder (ending in /) or a file.", name))}
	case perStream:
		k.Kind = KeyPerStream
	case strings.HasSuffix(s, "/"):
		k.Kind = KeyFolder
	default:
		k.Kind = KeyObject
	}
	return k, nil
}

func streamVal(name, ext string) cty.Value {
	return cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal(name), "ext": cty.StringVal(ext)})
}

func (k *KeyTemplate) eval(name, ext string) (string, error) {
	ctx := k.ectx.NewChild()
	ctx.Variables = map[string]cty.Value{"stream": streamVal(name, ext)}
	if k.preview {
		ctx.Variables["run"] = cty.ObjectVal(map[string]cty.Value{"id": cty.StringVal("${run.id}")})
	}
	if k.runID != "" {
		ctx.Variables["run"] = cty.ObjectVal(map[string]cty.Value{"id": cty.StringVal(k.runID)})
	}
	val, diags := k.expr.Value(ctx)
	if diags.HasErrors() {
		return "", fmt.Errorf("rendering %s: %s", k.Attr, diags.Error())
	}
	val, _ = val.UnmarkDeep()
	if !val.IsKnown() || val.IsNull() || val.Type() != cty.String {
		return "", fmt.Errorf("rendering %s: the value is not known yet", k.Attr)
	}
	return val.AsString(), nil
}

// Render returns where the stream called name, with extension ext, goes.
func (k *KeyTemplate) Render(name, ext string) (string, error) {
	s, err := k.eval(name, ext)
	if err != nil {
		return "", err
	}
	if k.Kind == KeyFolder {
		return s + name + ext, nil
	}
	return s, nil
}

// ManifestKey returns where the run's manifest goes: ManifestName in a
// folder, the template rendered for a stream named "pipe-manifest" with
// extension ".json", or beside a single object with ".pipe-manifest.json"
// appended.
func (k *KeyTemplate) ManifestKey() (string, error) {
	switch k.Kind {
	case KeyFolder:
		s, err := k.eval("", "")
		return s + ManifestName, err
	case KeyObject:
		s, err := k.eval("", "")
		return s + "." + ManifestName, err
	}
	return k.eval(strings.TrimSuffix(ManifestName, ".json"), ".json")
}

// IsManifest reports whether an object key names a pipe manifest.
func IsManifest(key string) bool { return manifest.IsKey(key) }
