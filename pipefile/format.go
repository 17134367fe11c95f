package pipefile

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
)

// ParseSyntax checks that src is HCL within the loader's limits, before
// pipe fmt rewrites it (hclwrite.Format formats anything, errors and
// all); the diagnostics say what is wrong. The formatting itself is the
// caller's: hclwrite stays out of this package, which pipe-wal links and
// starts once per WAL segment.
func ParseSyntax(path string, src []byte) (*hclparse.Parser, hcl.Diagnostics) {
	p := hclparse.NewParser()
	if diags := hclvalue.CheckLimits(path, src); diags.HasErrors() {
		return p, diags
	}
	_, diags := p.ParseHCL(src, path)
	return p, diags
}
