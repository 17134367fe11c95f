package pipefile

import (
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"

	"github.com/pipebackup/pipe/drill"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Drill is a drill block: pipe drill restores a run through Pipeline into
// a scratch server of Image and runs the checks.
type Drill struct {
	Name     string
	Range    hcl.Range
	Pipeline string
	// PipelineRange is where the pipeline attribute is, for errors.
	PipelineRange hcl.Range
	Image         string
	// User is the superuser the checks connect as in a restored base
	// backup ("": postgres).
	User    string
	Amcheck bool
	Timeout time.Duration
	Checks  []*drill.Check
}

var drillAttrs = []sdk.Attribute{
	{Name: "pipeline", Type: sdk.String, Required: true, Description: "The restore pipeline of this file that restores the run: its storage source reads the run, its one sink (postgres or mysql) is pointed at the scratch server, or (postgres_basebackup) at a scratch folder that the scratch server recovers to the end of the archive."},
	{Name: "image", Type: sdk.String, Required: true, Description: `The scratch server: a container image with the official postgres or mariadb image's interface, of the version the backups come from ("postgres:15", "mariadb:10.11").`},
	{Name: "user", Type: sdk.String, Description: "Base backups: the restored cluster's superuser, whom the checks connect as over the server's Unix socket (default postgres). A database restore connects as the scratch server's superuser."},
	{Name: "amcheck", Type: sdk.Bool, Default: false, Description: "PostgreSQL: run pg_amcheck on every database (tables and B-tree indexes, with --heapallindexed) after the checks."},
	{Name: "timeout", Type: sdk.Duration, Default: 2 * time.Hour, Description: "The longest the whole drill may take; it then fails, and the scratch server is removed."},
}

var checkAttrs = []sdk.Attribute{
	{Name: "database", Type: sdk.String, Description: "The database the query runs in (default: the restore sink's database)."},
	{Name: "query", Type: sdk.String, Required: true, Description: "The SQL query."},
	{Name: "expect", Type: sdk.String, Description: `Its whole result, rows on lines and columns separated by | ("1000", "ok|3").`},
	{Name: "at_least", Type: sdk.Number, Description: "The least its first value may be (a row count)."},
}

// loadDrill decodes a drill block into f.Drills.
func (f *File) loadDrill(b *hcl.Block, vars map[string]cty.Value, funcs map[string]functionT, o *Options, src []byte) hcl.Diagnostics {
	name := b.Labels[0]
	if d := blockName("drill", b, func(name string) *hcl.Range {
		for _, d := range f.Drills {
			if d.Name == name {
				return &d.Range
			}
		}
		return nil
	}); d != nil {
		return d
	}
	ectx := evalContext(vars, "", o.RunID, funcs)
	content, diags := b.Body.Content(&hcl.BodySchema{Attributes: hclvalue.Schema(drillAttrs, ""),
		Blocks: []hcl.BlockHeaderSchema{{Type: "check", LabelNames: []string{"name"}}}})
	blk, d := f.decodeAttributes("drill", b.DefRange, content.Attributes, drillAttrs, "", ectx, src)
	diags = append(diags, d...)
	dr := &Drill{Name: name, Range: b.DefRange, Pipeline: blk.String("pipeline"), PipelineRange: blk.AttrRange("pipeline"), Image: blk.String("image"), User: blk.String("user")}
	dr.Amcheck, _ = blk.Values["amcheck"].(bool)
	dr.Timeout, _ = blk.Values["timeout"].(time.Duration)
	for _, cb := range content.Blocks {
		c, d := f.loadCheck(dr, cb, ectx, src)
		diags = append(diags, d...)
		if c != nil {
			dr.Checks = append(dr.Checks, c)
		}
	}
	f.Drills = append(f.Drills, dr)
	return diags
}

// loadCheck decodes a check block of drill dr.
func (f *File) loadCheck(dr *Drill, b *hcl.Block, ectx *hcl.EvalContext, src []byte) (*drill.Check, hcl.Diagnostics) {
	for _, c := range dr.Checks {
		if c.Name == b.Labels[0] {
			return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Duplicate check",
				Detail: fmt.Sprintf("Drill %q already has a check named %q.", dr.Name, c.Name), Subject: b.LabelRanges[0].Ptr()}}
		}
	}
	blk, diags := f.decodeBlock(b, "check", checkAttrs, "", ectx, src)
	c := &drill.Check{Name: b.Labels[0], Database: blk.String("database"), Query: blk.String("query")}
	c.Expect, c.HasExpect = blk.Values["expect"].(string)
	if n, ok := blk.Values["at_least"].(int64); ok {
		c.AtLeast, c.HasAtLeast = float64(n), true
	}
	if c.HasExpect && c.HasAtLeast {
		diags = append(diags, hclvalue.Diag(blk.attrs["at_least"], "expect or at_least", "A check compares its result with expect, or its first value with at_least: write a check for each."))
	}
	return c, diags
}

// checkDrills checks that each drill names a restore pipeline of the file
// whose one sink is a database a drill can start.
func (f *File) checkDrills() hcl.Diagnostics {
	var diags hcl.Diagnostics
	for _, d := range f.Drills {
		if d.Pipeline == "" {
			continue
		}
		p := f.Pipeline(d.Pipeline)
		if p == nil {
			if !slices.Contains(f.Names, d.Pipeline) {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "No such pipeline",
					Detail: fmt.Sprintf("Drill %q restores through pipeline %q, which the file does not define.", d.Name, d.Pipeline), Subject: d.PipelineRange.Ptr()})
			}
			continue // left out by --pipeline
		}
		if len(p.Sinks) != 1 || (drill.Kinds[p.Sinks[0].Type] == nil && p.Sinks[0].Type != drill.BaseBackupSink) || p.Source == nil || !p.Source.Schema.Storage {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Not a database restore",
				Detail: fmt.Sprintf("Drill %q restores through pipeline %q, which must read a store of runs and have one sink, postgres, mysql or postgres_basebackup: the sink the drill points at its scratch server.", d.Name, d.Pipeline), Subject: d.PipelineRange.Ptr()})
		}
	}
	return diags
}
