package pipefile

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"

	"github.com/pipebackup/pipe/catalog"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// Options is what a load knows about the run.
type Options struct {
	// Vars are the --var name=value overrides.
	Vars map[string]string
	// LookupEnv reads the environment for env() and PIPE_VAR_name; nil
	// means the process environment.
	LookupEnv func(string) (string, bool)
	// RunID is the run's id. It is empty for validate and plan, where
	// ${run.id} is not known yet.
	RunID string
	// Now is what timestamp() returns.
	Now time.Time
	// Dir is where relative paths in file() start; "" is the working
	// directory.
	Dir string
	// Schemas declares the endpoint types the file may use.
	Schemas Schemas
	// Pipelines, when set, are the only pipelines decoded (--pipeline):
	// the others' blocks are not read, so a mistake in one of them, or a
	// variable only they use, does not stop these.
	Pipelines []string
	// HideEnv, when set, is told the name of every environment variable
	// the file reads with env(), before any plugin starts: those values
	// reach endpoints through their attributes only, so plugin processes
	// and the commands they start are not given them.
	HideEnv func(name string)
	// Running says the file is loaded to act on (pipe wal), without a run
	// id: as for a run, a variable without a value is an error.
	Running bool
	// SkipDecrypt leaves the decrypt blocks of archives unread (pipe wal
	// push, list, verify without --decrypt): the database server needs no
	// private key, nor the file it names, to archive.
	SkipDecrypt bool
	// SkipSign leaves the sign blocks of archives unread (pipe wal fetch,
	// list, verify): where WAL is restored, the signing key is not.
	// SkipTrust leaves their trust blocks unread (pipe wal push, which
	// checks no signature).
	SkipSign, SkipTrust bool
}

// running reports whether the load is for a run: a variable without a
// value, or env() of an unset variable, is then an error where it is used;
// validate and plan (no run id) carry them as unknown values.
func (o *Options) running() bool { return o.RunID != "" || o.Running }

func (o *Options) lookupEnv(name string) (string, bool) {
	if o.LookupEnv != nil {
		return o.LookupEnv(name)
	}
	return os.LookupEnv(name)
}

// Schemas tells the loader which endpoint types exist and their schemas.
type Schemas interface {
	// Schema returns the schema of the endpoint type typ of kind ("source"
	// or "sink"). found is false when nothing provides it; err says why a
	// plugin that should provide it failed.
	Schema(kind, typ string) (schema sdk.Schema, found bool, err error)
	// Types lists the known types of a kind, for suggestions.
	Types(kind string) []string
	// Pin makes plugin name come from path and start only if its
	// executable has the given SHA-256 (each may be empty).
	Pin(name, path, sha256 string) error
	// Process names the plugin process that serves the type, "" when it
	// runs inside pipe.
	Process(kind, typ string) string
}

// File is a loaded pipeline file.
type File struct {
	Path      string
	Variables []*Variable
	Pipelines []*Pipeline
	// Archives are the file's WAL archives (archive blocks).
	Archives []*Archive
	// Notifies are the targets told of the file's runs (notify blocks).
	Notifies []*Notify
	// Drills are its drill blocks.
	Drills []*Drill
	// Names are the names of every pipeline block, in file order, also
	// those Options.Pipelines left out.
	Names   []string
	parser  *hclparse.Parser
	secrets map[string]bool
	// unset holds the variables without a value, by name: unknown at
	// validate and plan, an error where a run uses them.
	unset   map[string]*Variable
	running bool
}

// Variable is a variable block with its final value.
type Variable struct {
	Name        string
	Description string
	Sensitive   bool
	Value       cty.Value
	Range       hcl.Range
	// Unset is true when the variable has no default and no value: it is
	// unknown until a run gives it one.
	Unset bool
}

// Pipeline is one pipeline block.
type Pipeline struct {
	Name  string
	Range hcl.Range
	// Attrs holds the pipeline's own attributes (profile, chunk_size,
	// buffers, streams).
	Attrs  *Block
	Source *Endpoint
	Stages []*Block
	Sinks  []*Endpoint
	// RateLimit is the most bytes per second the source yields, over all
	// streams (0: no limit).
	RateLimit int64
	// Hooks are its hook blocks.
	Hooks []*Hook
	// Sign is its sign block (nil: runs are not signed), Trust its trust
	// block (nil: the signatures of the runs it reads are not checked).
	Sign, Trust *Block
}

// Block is a decoded block: its values by attribute name, with the
// attributes' positions for later diagnostics.
type Block struct {
	Type   string
	Range  hcl.Range
	Values map[string]any
	// Unknown attributes depend on ${run.id} and are known only at run time.
	Unknown map[string]bool
	// Sensitive attributes are secret by schema or hold a sensitive variable.
	Sensitive map[string]bool
	attrs     hcl.Attributes
	src       []byte
}

// Endpoint is a source or sink block.
type Endpoint struct {
	Block
	// Kind is "source" or "sink"; Type is the endpoint type ("fs").
	Kind   string
	Schema sdk.Schema
	// TypeRange is the position of the type label.
	TypeRange hcl.Range
	// Key is the per-stream location template of a sink, if it has one.
	Key *KeyTemplate
	// Process is the plugin process that serves the endpoint, "" when it
	// runs inside pipe.
	Process string
	// Retention of a storage sink: after a successful run, the older runs
	// of the same pipeline that no rule keeps are deleted.
	Retention Retention
	// RateLimit of a sink: the most bytes per second it is given, over all
	// streams (0: no limit).
	RateLimit int64
	// Selection of a storage source: which run a restore (or a copy)
	// reads from a folder or prefix of runs.
	Selection Selection
}

// Selection says which run of a store to read (see catalog.Selection).
type Selection = catalog.Selection

// Stores reports whether a sink keeps objects that a restore reads back,
// under a path pipe renders per stream: a storage sink, with its key
// attribute, not switched to consuming its streams (the fs sink's untar).
// A run writes such a sink a manifest.
func (e *Endpoint) Stores() bool {
	if e.Kind != "sink" || !e.Schema.Storage || e.Key == nil {
		return false
	}
	for _, a := range e.Schema.Attributes {
		if on, _ := e.Values[a.Name].(bool); a.Consumer && on {
			return false
		}
	}
	return true
}

// retentionAttrs are pipe's own attributes of every storage sink.
var retentionAttrs = []sdk.Attribute{
	{Name: "keep_last", Type: sdk.Number, Description: "After a successful run, keep this many runs of the pipeline (the newest), deleting older ones."},
	{Name: "keep_within", Type: sdk.String, Description: `After a successful run, keep the runs that finished within this long ("30d", "12h", "2w"), deleting older ones.`},
	{Name: "keep_daily", Type: sdk.Number, Description: "After a successful run, keep the newest complete run of each of the last this many days that have one (local time), deleting older ones."},
	{Name: "keep_weekly", Type: sdk.Number, Description: "Likewise for ISO weeks (Monday to Sunday)."},
	{Name: "keep_monthly", Type: sdk.Number, Description: "Likewise for calendar months."},
	{Name: "keep_yearly", Type: sdk.Number, Description: "Likewise for calendar years."},
}

// Has reports whether the attribute was set (or has a default).
func (b *Block) Has(name string) bool {
	_, ok := b.Values[name]
	return ok || b.Unknown[name]
}

// Set reports whether the attribute appears in the file.
func (b *Block) Set(name string) bool {
	_, ok := b.attrs[name]
	return ok
}

// String returns a string attribute.
func (b *Block) String(name string) string {
	s, _ := b.Values[name].(string)
	return s
}

// Int returns a number or size attribute and whether it is set.
func (b *Block) Int(name string) (int64, bool) {
	n, ok := b.Values[name].(int64)
	return n, ok
}

// Strings returns a list attribute.
func (b *Block) Strings(name string) []string {
	s, _ := b.Values[name].([]string)
	return s
}

// AttrRange returns the position of an attribute's value, or of the block
// when the attribute is not in the file.
func (b *Block) AttrRange(name string) hcl.Range {
	if a, ok := b.attrs[name]; ok {
		return a.Expr.Range()
	}
	return b.Range
}

// Source returns the text of an attribute's value as written.
func (b *Block) Source(name string) string {
	a, ok := b.attrs[name]
	if !ok || b.src == nil {
		return ""
	}
	return string(a.Expr.Range().SliceBytes(b.src))
}

// Files returns the parsed files, for rendering diagnostics with snippets.
func (f *File) Files() map[string]*hcl.File {
	if f == nil || f.parser == nil {
		return nil
	}
	return f.parser.Files()
}

// Secrets returns every secret value in the file (secret attributes and
// sensitive variables), longest first, for scrubbing from messages.
func (f *File) Secrets() []string {
	var out []string
	for s := range f.secrets {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// Pipeline returns the pipeline called name.
func (f *File) Pipeline(name string) *Pipeline {
	for _, p := range f.Pipelines {
		if p.Name == name {
			return p
		}
	}
	return nil
}

var rootSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{
		{Type: "variable", LabelNames: []string{"name"}},
		{Type: "plugin", LabelNames: []string{"name"}},
		{Type: "pipeline", LabelNames: []string{"name"}},
		{Type: "archive", LabelNames: []string{"name"}},
		{Type: "notify", LabelNames: []string{"name"}},
		{Type: "drill", LabelNames: []string{"name"}},
	},
}

var pluginAttrs = []sdk.Attribute{
	{Name: "path", Type: sdk.String, Description: "The plugin's executable (default: pipe-plugin-NAME on the plugin path)."},
	{Name: "sha256", Type: sdk.String, Description: "The SHA-256 its executable must have; pipe refuses to start it otherwise."},
}

var pipelineAttrs = []sdk.Attribute{
	{Name: "profile", Type: sdk.String, Description: "Resource preset: conservative, balanced, performance, max-performance, turbo or auto."},
	{Name: "chunk_size", Type: sdk.Size, Description: "Size of the chunks the source reads (default from the profile)."},
	{Name: "buffers", Type: sdk.Number, Description: "Total chunk buffers of a run (default: computed from workers and streams)."},
	{Name: "streams", Type: sdk.Number, Description: "How many streams move at once (default from the profile)."},
	rateAttr,
	{Name: "wal_archive", Type: sdk.String, Description: "The archive block whose WAL this pipeline's base backups need (pipe verify checks it holds their range; retention removes the WAL only they needed). Default: the file's only archive."},
}

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)

// Load reads and decodes a pipeline file.
func Load(path string, o Options) (*File, hcl.Diagnostics) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError,
			Summary:  "Cannot read the pipeline file",
			Detail:   err.Error(),
		}}
	}
	return LoadSource(path, src, o)
}

// LoadSource decodes a pipeline file from src; path names it in
// diagnostics.
func LoadSource(path string, src []byte, o Options) (*File, hcl.Diagnostics) {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	f := &File{Path: path, parser: hclparse.NewParser(), secrets: map[string]bool{}, unset: map[string]*Variable{}, running: o.running()}
	if d := hclvalue.CheckLimits(path, src); d.HasErrors() {
		return f, d
	}
	hf, diags := f.parser.ParseHCL(src, path)
	if diags.HasErrors() {
		return f, diags
	}
	if o.HideEnv != nil {
		for _, name := range envReads(hf) {
			o.HideEnv(name)
		}
	}
	content, d := hf.Body.Content(rootSchema)
	diags = append(diags, d...)
	funcs := functions(&o)

	vars, d := f.loadVariables(content.Blocks, &o, funcs)
	diags = append(diags, d...)
	diags = append(diags, f.loadPlugins(content.Blocks, &o, vars, funcs, src)...)

	seen := map[string]hcl.Range{}
	for _, b := range content.Blocks {
		switch b.Type {
		case "archive":
			diags = append(diags, f.loadArchiveBlock(b, vars, funcs, &o, src)...)
		case "pipeline":
			diags = append(diags, f.loadPipelineBlock(b, seen, vars, funcs, &o, src)...)
		case "notify":
			diags = append(diags, f.loadNotify(b, vars, funcs, &o, src)...)
		case "drill":
			diags = append(diags, f.loadDrill(b, vars, funcs, &o, src)...)
		}
	}
	diags = append(diags, f.checkDrills()...)
	if len(seen) == 0 && len(f.Archives) == 0 && !diags.HasErrors() {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError, Summary: "No pipeline",
			Detail:  `The file defines no pipeline block: add pipeline "name" { source "…" { } sink "…" { } }.`,
			Subject: hf.Body.MissingItemRange().Ptr(),
		})
	}
	return f, diags
}

// loadArchiveBlock checks an archive block's name and adds the archive
// to f.
func (f *File) loadArchiveBlock(b *hcl.Block, vars map[string]cty.Value, funcs map[string]functionT, o *Options, src []byte) hcl.Diagnostics {
	name := b.Labels[0]
	if d := blockName("archive", b, f.archiveAt); d != nil {
		return d
	}
	a, d := f.loadArchive(b, evalContext(vars, name, o.RunID, funcs), o, src)
	f.Archives = append(f.Archives, a)
	return d
}

// loadPipelineBlock checks a pipeline block's name against those seen so
// far (recording it there), and adds the pipeline to f unless
// o.Pipelines leaves it out.
func (f *File) loadPipelineBlock(b *hcl.Block, seen map[string]hcl.Range, vars map[string]cty.Value, funcs map[string]functionT, o *Options, src []byte) hcl.Diagnostics {
	name := b.Labels[0]
	if !nameRE.MatchString(name) {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError, Summary: "Invalid pipeline name",
			Detail:  fmt.Sprintf("%q: a pipeline name starts with a letter or _ and holds letters, digits, _ and -.", name),
			Subject: b.LabelRanges[0].Ptr(),
		}}
	}
	if prev, dup := seen[name]; dup {
		return hcl.Diagnostics{{
			Severity: hcl.DiagError, Summary: "Duplicate pipeline",
			Detail:  fmt.Sprintf("A pipeline named %q is already defined at %s.", name, pos(prev)),
			Subject: b.LabelRanges[0].Ptr(),
		}}
	}
	seen[name] = b.DefRange
	f.Names = append(f.Names, name)
	if len(o.Pipelines) > 0 && !slices.Contains(o.Pipelines, name) {
		return nil
	}
	ectx := evalContext(vars, name, o.RunID, funcs)
	p, d := f.loadPipeline(b, ectx, o, src)
	if p != nil {
		f.Pipelines = append(f.Pipelines, p)
	}
	return d
}

// evalContext is what expressions in a pipeline see. stream is unknown
// here: it is known only when a sink renders its key for a stream.
func evalContext(vars map[string]cty.Value, pipeline, runID string, funcs map[string]functionT) *hcl.EvalContext {
	run := cty.UnknownVal(cty.String)
	if runID != "" {
		run = cty.StringVal(runID)
	}
	varObj := cty.EmptyObjectVal
	if len(vars) > 0 {
		varObj = cty.ObjectVal(vars)
	}
	return &hcl.EvalContext{
		Variables: map[string]cty.Value{
			"var":      varObj,
			"pipeline": cty.ObjectVal(map[string]cty.Value{"name": cty.StringVal(pipeline)}),
			"run":      cty.ObjectVal(map[string]cty.Value{"id": run}),
			"stream":   cty.ObjectVal(map[string]cty.Value{"name": cty.UnknownVal(cty.String), "ext": cty.UnknownVal(cty.String)}),
		},
		Functions: funcs,
	}
}

func (f *File) loadPipeline(b *hcl.Block, ectx *hcl.EvalContext, o *Options, src []byte) (*Pipeline, hcl.Diagnostics) {
	p := &Pipeline{Name: b.Labels[0], Range: b.DefRange}
	schema := &hcl.BodySchema{
		Attributes: hclvalue.Schema(pipelineAttrs, ""),
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "source", LabelNames: []string{"type"}},
			{Type: "sink", LabelNames: []string{"type"}},
			{Type: "hook", LabelNames: []string{"when"}},
		},
	}
	schema.Blocks = append(schema.Blocks, signingBlocks...)
	for _, k := range stagekind.All {
		schema.Blocks = append(schema.Blocks, hcl.BlockHeaderSchema{Type: k.Name})
	}
	content, diags := b.Body.Content(schema)
	attrs, d := f.decodeAttributes("pipeline", b.DefRange, content.Attributes, pipelineAttrs, "", ectx, src)
	diags = append(diags, d...)
	p.Attrs = attrs
	diags = append(diags, attrs.takeRate(&p.RateLimit)...)

	stageSeen := map[string]hcl.Range{}
	for _, blk := range content.Blocks {
		switch blk.Type {
		case "source":
			ep, d := f.loadEndpoint(blk, ectx, o, src)
			diags = append(diags, d...)
			if p.Source != nil {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError, Summary: "More than one source",
					Detail:  fmt.Sprintf("Pipeline %q already has a source at %s; a pipeline reads one source (which may yield many streams). Use another pipeline for another source.", p.Name, pos(p.Source.Range)),
					Subject: blk.DefRange.Ptr(),
				})
				continue
			}
			if ep != nil {
				p.Source = ep
			} else {
				p.Source = &Endpoint{Block: Block{Range: blk.DefRange}} // keep the position for "more than one"
			}
		case "sink":
			ep, d := f.loadEndpoint(blk, ectx, o, src)
			diags = append(diags, d...)
			if ep != nil {
				p.Sinks = append(p.Sinks, ep)
			}
		case "hook":
			diags = append(diags, f.loadHook(p, blk, ectx, src)...)
		case "sign":
			diags = append(diags, f.loadSigning(blk, fmt.Sprintf("Pipeline %q", p.Name), &p.Sign, ectx, src)...)
		case "trust":
			diags = append(diags, f.loadSigning(blk, fmt.Sprintf("Pipeline %q", p.Name), &p.Trust, ectx, src)...)
		default:
			if prev, dup := stageSeen[blk.Type]; dup {
				diags = append(diags, &hcl.Diagnostic{
					Severity: hcl.DiagError, Summary: "Duplicate " + blk.Type + " block",
					Detail:  fmt.Sprintf("Pipeline %q already has a %s stage at %s.", p.Name, blk.Type, pos(prev)),
					Subject: blk.DefRange.Ptr(),
				})
				continue
			}
			stageSeen[blk.Type] = blk.DefRange
			attrs := stagekind.Lookup(blk.Type).Attributes // the schema allows only kinds' blocks here
			st, d := f.decodeBlock(blk, blk.Type, attrs, "", ectx, src)
			diags = append(diags, d...)
			p.Stages = append(p.Stages, st)
		}
	}
	if p.Source == nil {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError, Summary: "Missing source",
			Detail:  fmt.Sprintf(`Pipeline %q has no source block: add one, e.g. source "fs" { path = "data/" }.`, p.Name),
			Subject: b.DefRange.Ptr(),
		})
	} else if p.Source.Type == "" {
		p.Source = nil
	}
	if p.Trust != nil && p.Source != nil && !p.Source.Schema.Storage {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Nothing to trust",
			Detail:  fmt.Sprintf("Pipeline %q reads %s, not runs from a store: trust checks the signatures of the runs a restore, a copy or pipe verify reads. Put it in the pipeline whose source is the store.", p.Name, p.Source.Type),
			Subject: p.Trust.Range.Ptr()})
	}
	diags = append(diags, p.targetSelection()...)
	if len(p.Sinks) == 0 && !hasSinkBlock(content.Blocks) {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError, Summary: "Missing sink",
			Detail:  fmt.Sprintf(`Pipeline %q has no sink block: add one, e.g. sink "fs" { path = "backups/" }.`, p.Name),
			Subject: b.DefRange.Ptr(),
		})
	}
	return p, diags
}

// targetSelection records the point a restore recovers to (a sink's
// Target attribute: a time, or a PostgreSQL WAL position): the run it
// reads must have ended before it, and unless the source names a run it
// reads the newest that did (see catalog.Target).
func (p *Pipeline) targetSelection() hcl.Diagnostics {
	if p.Source == nil || !p.Source.Schema.Storage {
		return nil
	}
	for _, s := range p.Sinks {
		for _, a := range s.Schema.Attributes {
			v := s.String(a.Name)
			if !a.Target || v == "" {
				continue
			}
			target := &catalog.Target{Attribute: a.Name, Value: v}
			t, err := sdk.ParsePointInTime(v)
			if err == nil {
				target.Time = t.UTC()
			} else if strings.Contains(v, "/") {
				target.LSN, err = sdk.ParseLSN(v)
			}
			if err != nil {
				return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Invalid " + a.Name, Detail: err.Error() + ".", Subject: s.AttrRange(a.Name).Ptr()}}
			}
			p.Source.Selection.Target = target
			return nil
		}
	}
	return nil
}

func hasSinkBlock(bs hcl.Blocks) bool {
	for _, b := range bs {
		if b.Type == "sink" {
			return true
		}
	}
	return false
}

// loadPlugins pins the plugins the file names before any endpoint is
// looked up. Their attributes may use variables and functions.
func (f *File) loadPlugins(blocks hcl.Blocks, o *Options, vars map[string]cty.Value, funcs map[string]functionT, src []byte) hcl.Diagnostics {
	var diags hcl.Diagnostics
	seen := map[string]bool{}
	varObj := cty.EmptyObjectVal
	if len(vars) > 0 {
		varObj = cty.ObjectVal(vars)
	}
	fctx := &hcl.EvalContext{Functions: funcs, Variables: map[string]cty.Value{"var": varObj}}
	for _, b := range blocks {
		if b.Type != "plugin" {
			continue
		}
		name := b.Labels[0]
		if seen[name] {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate plugin block",
				Detail: fmt.Sprintf("Plugin %q is pinned twice.", name), Subject: b.LabelRanges[0].Ptr()})
			continue
		}
		seen[name] = true
		c, d := b.Body.Content(&hcl.BodySchema{Attributes: hclvalue.Schema(pluginAttrs, "")})
		diags = append(diags, d...)
		blk, d := f.decodeAttributes("plugin", b.DefRange, c.Attributes, pluginAttrs, "", fctx, src)
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		if err := o.Schemas.Pin(name, blk.String("path"), blk.String("sha256")); err != nil {
			rng := b.LabelRanges[0]
			if blk.Set("sha256") {
				rng = blk.AttrRange("sha256")
			}
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid plugin pin", Detail: err.Error() + ".", Subject: rng.Ptr()})
		}
	}
	return diags
}

func (f *File) loadEndpoint(blk *hcl.Block, ectx *hcl.EvalContext, o *Options, src []byte) (*Endpoint, hcl.Diagnostics) {
	kind, typ := blk.Type, blk.Labels[0]
	schema, ok, err := o.Schemas.Schema(kind, typ)
	if err != nil {
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError, Summary: fmt.Sprintf("Plugin for %s %q failed", kind, typ),
			Detail: err.Error() + ".", Subject: blk.LabelRanges[0].Ptr(),
		}}
	}
	known := o.Schemas.Types(kind)
	if !ok {
		detail := fmt.Sprintf("There is no %s type %q. Available: %s; a plugin adds one as an executable %s on the plugin path (pipe plugins lists them).", kind, typ, strings.Join(known, ", "), "pipe-plugin-"+typ)
		if s := suggest(typ, known); s != "" {
			detail = fmt.Sprintf("There is no %s type %q. Did you mean %q? Available: %s.", kind, typ, s, strings.Join(known, ", "))
		}
		return nil, hcl.Diagnostics{{
			Severity: hcl.DiagError, Summary: fmt.Sprintf("Unknown %s type", kind),
			Detail: detail, Subject: blk.LabelRanges[0].Ptr(),
		}}
	}
	keyName := ""
	if ka, ok := schema.KeyAttribute(); ok && kind == "sink" {
		keyName = ka.Name
	}
	attrs := schema.Attributes
	if kind == "sink" {
		attrs = append(append([]sdk.Attribute(nil), attrs...), rateAttr)
		if schema.Storage {
			attrs = append(attrs, retentionAttrs...)
		}
	}
	if kind == "source" && schema.Storage {
		attrs = append([]sdk.Attribute(nil), attrs...)
		for _, a := range selectionAttrs {
			if _, taken := schema.Attribute(a.Name); !taken {
				attrs = append(attrs, a)
			}
		}
	}
	b, diags := f.decodeBlock(blk, kind+" "+typ, attrs, keyName, ectx, src)
	ep := &Endpoint{Block: *b, Kind: kind, Schema: schema, TypeRange: blk.LabelRanges[0], Process: o.Schemas.Process(kind, typ)}
	diags = append(diags, ep.takeRetention()...)
	diags = append(diags, ep.takeSelection()...)
	diags = append(diags, ep.takeRate(&ep.RateLimit)...)
	ep.Type = typ
	if a, ok := b.attrs[keyName]; ok && keyName != "" {
		k, d := f.newKeyTemplate(keyName, a, ectx, src)
		diags = append(diags, d...)
		ep.Key = k
	}
	return ep, diags
}

// pos prints a position as file:line:column.
func pos(r hcl.Range) string {
	return fmt.Sprintf("%s:%d:%d", r.Filename, r.Start.Line, r.Start.Column)
}

// selectionAttrs are pipe's own attributes of every storage source.
var selectionAttrs = []sdk.Attribute{
	{Name: "run", Type: sdk.String, Public: true, Description: "The run to restore (its id, as pipe backups lists it). Default: the newest complete run."},
	{Name: "before", Type: sdk.String, Description: `Restore the newest complete run that finished before this time: "2026-11-20T00:00:00Z", "2026-11-20 06:00" (UTC) or "2026-11-20".`},
	{Name: "pipeline", Type: sdk.String, Public: true, Description: "Restore runs of this pipeline. Default: the only pipeline whose runs the folder or prefix holds; with several, pipe asks."},
}

// ParseTime reads a point in time as a user writes it: RFC 3339, or a UTC
// date and time ("2026-11-20 06:00", "2026-11-20T06:00"), or a date.
func ParseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02 15:04:05", "2006-01-02T15:04", "2006-01-02 15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not a time: write e.g. \"2026-11-20T06:00:00Z\", \"2026-11-20 06:00\" (UTC) or \"2026-11-20\"", s)
}

// takeSelection moves the run selection out of a storage source's values:
// it is pipe's, not the plugin's.
func (e *Endpoint) takeSelection() hcl.Diagnostics {
	if e.Kind != "source" || !e.Schema.Storage {
		return nil
	}
	var diags hcl.Diagnostics
	e.Selection.RunID = e.String("run")
	e.Selection.Pipeline = e.String("pipeline")
	if s := e.String("before"); s != "" {
		t, err := ParseTime(s)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid before",
				Detail: err.Error() + ".", Subject: e.AttrRange("before").Ptr()})
		}
		e.Selection.Before = t
	}
	if e.Selection.RunID != "" && !e.Selection.Before.IsZero() {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "run and before",
			Detail: "Give run (one run by its id) or before (the newest run before a time), not both.", Subject: e.AttrRange("before").Ptr()})
	}
	if p := e.Selection.Pipeline; p != "" && !nameRE.MatchString(p) {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid pipeline",
			Detail: fmt.Sprintf("%q is not a pipeline name.", p), Subject: e.AttrRange("pipeline").Ptr()})
	}
	for _, a := range selectionAttrs {
		if _, theirs := e.Schema.Attribute(a.Name); !theirs {
			delete(e.Values, a.Name)
		}
	}
	return diags
}

// takeRetention moves the retention attributes out of the endpoint's
// values: they are pipe's, not the plugin's.
func (e *Endpoint) takeRetention() hcl.Diagnostics {
	var diags hcl.Diagnostics
	r := &e.Retention
	for _, c := range []struct {
		attr string
		n    *int
	}{{"keep_last", &r.Last}, {"keep_daily", &r.Daily}, {"keep_weekly", &r.Weekly}, {"keep_monthly", &r.Monthly}, {"keep_yearly", &r.Yearly}} {
		n, ok := e.Int(c.attr)
		if ok && n < 1 {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid " + c.attr,
				Detail: fmt.Sprintf("%s = %d: keep at least one run (1); leave it out to keep none by this rule.", c.attr, n), Subject: e.AttrRange(c.attr).Ptr()})
		}
		*c.n = int(n)
	}
	if s := e.String("keep_within"); s != "" {
		d, err := ParseAge(s)
		if err != nil {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid keep_within",
				Detail: err.Error() + ".", Subject: e.AttrRange("keep_within").Ptr()})
		}
		r.Within = d
	}
	for _, a := range retentionAttrs {
		delete(e.Values, a.Name)
	}
	return diags
}

// ParseAge reads a retention age (see sdk.ParseAge).
func ParseAge(s string) (time.Duration, error) { return sdk.ParseAge(s) }
