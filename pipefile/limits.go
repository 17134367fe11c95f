package pipefile

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

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

// checkLimits refuses a file beyond the bounds, before it is parsed; the
// lexer it uses does not recurse.
func checkLimits(path string, src []byte) hcl.Diagnostics {
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
