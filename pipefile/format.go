package pipefile

import (
	"io"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclwrite"
)

// Format returns src in canonical HCL layout. A file with syntax errors is
// not formatted; the diagnostics say why.
func Format(path string, src []byte) ([]byte, *hclparse.Parser, hcl.Diagnostics) {
	p := hclparse.NewParser()
	if _, diags := p.ParseHCL(src, path); diags.HasErrors() {
		return nil, p, diags
	}
	return hclwrite.Format(src), p, nil
}

// WriteDiagnostics renders diagnostics the way Terraform does: severity,
// summary, file:line:column, a source snippet and the detail.
func WriteDiagnostics(w io.Writer, files map[string]*hcl.File, diags hcl.Diagnostics, color bool) error {
	width := 100
	dw := hcl.NewDiagnosticTextWriter(w, files, uint(width), color)
	return dw.WriteDiagnostics(diags)
}
