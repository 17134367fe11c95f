package pipefile

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// SetProfile sets profile = "name" in the pipeline block of the file at
// path, touching nothing else: the value of an existing literal profile is
// replaced; otherwise a line is added at the top of the block. Comments
// and formatting stay as they are. It refuses, with an error saying what
// to do instead, a profile set by an expression and a block written on one
// line; the file is replaced only if the edit still parses (`pipe bench
// --write`).
func SetProfile(path, pipeline, profile string) error {
	src, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	f, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return fmt.Errorf("%s no longer parses: %s", path, diags.Error())
	}
	var block *hclsyntax.Block
	for _, b := range f.Body.(*hclsyntax.Body).Blocks {
		if b.Type == "pipeline" && len(b.Labels) == 1 && b.Labels[0] == pipeline {
			block = b
		}
	}
	if block == nil {
		return fmt.Errorf("%s has no pipeline %q block", path, pipeline)
	}
	value := strconv.Quote(profile)
	var out []byte
	if attr, ok := block.Body.Attributes["profile"]; ok {
		if v, d := attr.Expr.Value(nil); d.HasErrors() || v.Type().FriendlyName() != "string" {
			return fmt.Errorf("profile in %s is an expression (%s); set it to %s yourself", path, attr.Expr.Range(), value)
		}
		r := attr.Expr.Range()
		out = append(append(append(out, src[:r.Start.Byte]...), value...), src[r.End.Byte:]...)
	} else {
		at := block.OpenBraceRange.End.Byte
		nl := strings.IndexByte(string(src[at:]), '\n')
		if nl < 0 || strings.TrimSpace(string(src[at:at+nl])) != "" {
			return fmt.Errorf("pipeline %q in %s is written on one line; add profile = %s yourself", pipeline, path, value)
		}
		at += nl + 1
		// Indent as the block's first line (one step more than its closing
		// brace), and keep the new line out of the alignment of the
		// attributes that follow.
		lines := strings.Split(string(src[at:]), "\n")
		ref := ""
		for _, l := range lines {
			if strings.TrimSpace(l) != "" {
				ref = l
				break
			}
		}
		indent := ref[:len(ref)-len(strings.TrimLeft(ref, " \t"))]
		if t := strings.TrimSpace(ref); t == "}" || t == "" {
			indent += "  "
		}
		ins := indent + "profile = " + value + "\n"
		if t := strings.TrimSpace(lines[0]); t != "" && t != "}" {
			ins += "\n"
		}
		out = append(append(append(out, src[:at]...), ins...), src[at:]...)
	}
	if _, d := hclsyntax.ParseConfig(out, path, hcl.InitialPos); d.HasErrors() {
		return fmt.Errorf("the edited file would not parse (%s); add profile = %s yourself", d.Error(), value)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".pipe-bench-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(out); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(fi.Mode().Perm()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
