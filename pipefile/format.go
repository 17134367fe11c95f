package pipefile

import (
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclwrite"
)

// Format returns src in canonical HCL layout. A file with syntax errors is
// not formatted; the diagnostics say why.
func Format(path string, src []byte) ([]byte, *hclparse.Parser, hcl.Diagnostics) {
	p := hclparse.NewParser()
	if diags := checkLimits(path, src); diags.HasErrors() {
		return nil, p, diags
	}
	if _, diags := p.ParseHCL(src, path); diags.HasErrors() {
		return nil, p, diags
	}
	return hclwrite.Format(src), p, nil
}
