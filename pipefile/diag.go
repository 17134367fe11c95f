package pipefile

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"
)

// WriteDiagnostics renders diagnostics for people, sorted by position:
//
//	Error: Unsupported argument
//	  on pipeline.hcl:3:5, in pipeline "p":
//	     3 |     pth = "data"
//	       |     ^^^
//	  An argument named "pth" is not expected here. Did you mean "path"?
//
// It never prints the values an expression evaluated to, which may be
// secret; the caller scrubs secrets that appear in the source itself.
func WriteDiagnostics(w io.Writer, files map[string]*hcl.File, diags hcl.Diagnostics, color bool) error {
	ds := make(hcl.Diagnostics, len(diags))
	copy(ds, diags)
	sort.SliceStable(ds, func(i, j int) bool {
		a, b := ds[i].Subject, ds[j].Subject
		switch {
		case a == nil || b == nil:
			return a == nil && b != nil
		case a.Filename != b.Filename:
			return a.Filename < b.Filename
		}
		return a.Start.Byte < b.Start.Byte
	})
	var buf bytes.Buffer
	for i, d := range ds {
		if i > 0 {
			buf.WriteByte('\n')
		}
		writeDiagnostic(&buf, files, d, color)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func writeDiagnostic(w *bytes.Buffer, files map[string]*hcl.File, d *hcl.Diagnostic, color bool) {
	sev, paint := "Error", "\x1b[1;31m"
	if d.Severity == hcl.DiagWarning {
		sev, paint = "Warning", "\x1b[1;33m"
	}
	if color {
		fmt.Fprintf(w, "%s%s:\x1b[0m \x1b[1m%s\x1b[0m\n", paint, sev, d.Summary)
	} else {
		fmt.Fprintf(w, "%s: %s\n", sev, d.Summary)
	}
	if s := d.Subject; s != nil {
		f := files[s.Filename]
		where := fmt.Sprintf("  on %s:%d:%d", s.Filename, s.Start.Line, s.Start.Column)
		if f != nil {
			if c, ok := f.Nav.(interface{ ContextString(int) string }); ok {
				if ctx := c.ContextString(s.Start.Byte); ctx != "" {
					where += ", in " + ctx
				}
			}
		}
		w.WriteString(where + ":\n")
		if f != nil {
			writeSnippet(w, f.Bytes, s)
		}
	}
	if d.Detail != "" {
		for _, line := range strings.Split(d.Detail, "\n") {
			w.WriteString("  " + line + "\n")
		}
	}
}

// writeSnippet prints the subject's first line with a caret underline.
func writeSnippet(w *bytes.Buffer, src []byte, s *hcl.Range) {
	if s.Start.Byte > len(src) {
		return
	}
	start := bytes.LastIndexByte(src[:s.Start.Byte], '\n') + 1
	end := bytes.IndexByte(src[start:], '\n')
	if end < 0 {
		end = len(src) - start
	}
	line := src[start : start+end]
	num := fmt.Sprintf("%6d | ", s.Start.Line)
	fmt.Fprintf(w, "%s%s\n", num, line)
	var pad strings.Builder
	for _, r := range string(src[start:s.Start.Byte]) {
		if r == '\t' {
			pad.WriteByte('\t')
		} else {
			pad.WriteByte(' ')
		}
	}
	stop := min(s.End.Byte, start+end)
	n := max(1, utf8.RuneCount(src[min(s.Start.Byte, stop):stop]))
	fmt.Fprintf(w, "%s%s%s\n", strings.Repeat(" ", 7)+"| ", pad.String(), strings.Repeat("^", n))
}
