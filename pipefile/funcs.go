package pipefile

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// functions returns the functions a pipeline file can call: env, file,
// timestamp, formatdate and go-cty's string and collection functions.
func functions(o *Options) map[string]function.Function {
	fs := map[string]function.Function{
		"env":        envFunc(o),
		"file":       fileFunc(o),
		"timestamp":  timestampFunc(o.Now),
		"formatdate": stdlib.FormatDateFunc,
		"basename":   pathFunc(filepath.Base),
		"dirname":    pathFunc(filepath.Dir),
	}
	for name, f := range map[string]function.Function{
		"abs": stdlib.AbsoluteFunc, "chomp": stdlib.ChompFunc, "coalesce": stdlib.CoalesceFunc,
		"compact": stdlib.CompactFunc, "concat": stdlib.ConcatFunc, "contains": stdlib.ContainsFunc,
		"distinct": stdlib.DistinctFunc, "element": stdlib.ElementFunc, "flatten": stdlib.FlattenFunc,
		"format": stdlib.FormatFunc, "formatlist": stdlib.FormatListFunc, "indent": stdlib.IndentFunc,
		"join": stdlib.JoinFunc, "keys": stdlib.KeysFunc, "length": stdlib.LengthFunc,
		"lookup": stdlib.LookupFunc, "lower": stdlib.LowerFunc, "max": stdlib.MaxFunc,
		"merge": stdlib.MergeFunc, "min": stdlib.MinFunc, "regex": stdlib.RegexFunc,
		"regexall": stdlib.RegexAllFunc, "regex_replace": stdlib.RegexReplaceFunc, "replace": stdlib.ReplaceFunc,
		"reverse": stdlib.ReverseListFunc, "slice": stdlib.SliceFunc, "sort": stdlib.SortFunc,
		"split": stdlib.SplitFunc, "strrev": stdlib.ReverseFunc, "substr": stdlib.SubstrFunc,
		"title": stdlib.TitleFunc, "tonumber": stdlib.MakeToFunc(cty.Number), "tostring": stdlib.MakeToFunc(cty.String),
		"tolist": stdlib.MakeToFunc(cty.List(cty.DynamicPseudoType)), "tomap": stdlib.MakeToFunc(cty.Map(cty.DynamicPseudoType)),
		"trim": stdlib.TrimFunc, "trimprefix": stdlib.TrimPrefixFunc, "trimspace": stdlib.TrimSpaceFunc,
		"trimsuffix": stdlib.TrimSuffixFunc, "upper": stdlib.UpperFunc, "values": stdlib.ValuesFunc,
		"zipmap": stdlib.ZipmapFunc,
	} {
		fs[name] = f
	}
	return fs
}

// envFunc reads an environment variable. env("X") fails when X is not
// set, so a missing secret is caught at load; env("X", "fallback") does not.
func envFunc(o *Options) function.Function {
	return function.New(&function.Spec{
		Params:   []function.Parameter{{Name: "name", Type: cty.String}},
		VarParam: &function.Parameter{Name: "default", Type: cty.String},
		Type:     function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			if len(args) > 2 {
				return cty.NilVal, fmt.Errorf("env takes a name and at most one default")
			}
			name := args[0].AsString()
			if o.HideEnv != nil {
				o.HideEnv(name)
			}
			if v, ok := o.lookupEnv(name); ok {
				return cty.StringVal(v), nil
			}
			if len(args) == 2 {
				return args[1], nil
			}
			if !o.running() {
				// validate and plan check a file where its secrets are
				// not set (a CI job): the value is known at run time.
				return cty.UnknownVal(cty.String), nil
			}
			return cty.NilVal, fmt.Errorf("the environment variable %s is not set; set it, or give a default: env(%q, \"…\")", name, name)
		},
	})
}

// maxFileSize bounds what file() reads.
const maxFileSize = 16 << 20

// fileFunc reads a file; relative paths start at the working directory.
func fileFunc(o *Options) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			p := args[0].AsString()
			if !filepath.IsAbs(p) && o.Dir != "" {
				p = filepath.Join(o.Dir, p)
			}
			fi, err := os.Stat(p)
			switch {
			case os.IsNotExist(err):
				return cty.NilVal, fmt.Errorf("no file %s (relative paths start at the working directory; `pipe keygen` creates a key pair)", args[0].AsString())
			case err != nil:
				return cty.NilVal, fmt.Errorf("cannot read %s: %v", args[0].AsString(), err)
			case !fi.Mode().IsRegular():
				return cty.NilVal, fmt.Errorf("%s is not a regular file", args[0].AsString())
			case fi.Size() > maxFileSize:
				return cty.NilVal, fmt.Errorf("%s is larger than %d MiB; file() reads small files such as keys", args[0].AsString(), maxFileSize>>20)
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return cty.NilVal, fmt.Errorf("cannot read %s: %v", args[0].AsString(), err)
			}
			return cty.StringVal(string(b)), nil
		},
	})
}

// timestampFunc returns the run's start time, the same on every call.
func timestampFunc(now time.Time) function.Function {
	return function.New(&function.Spec{
		Type: function.StaticReturnType(cty.String),
		Impl: func([]cty.Value, cty.Type) (cty.Value, error) {
			return cty.StringVal(now.UTC().Format(time.RFC3339)), nil
		},
	})
}

func pathFunc(f func(string) string) function.Function {
	return function.New(&function.Spec{
		Params: []function.Parameter{{Name: "path", Type: cty.String}},
		Type:   function.StaticReturnType(cty.String),
		Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
			return cty.StringVal(f(args[0].AsString())), nil
		},
	})
}

// envReads returns the names of the environment variables the file reads
// with env("NAME") (a literal name), found in the syntax tree before
// anything is evaluated.
func envReads(f *hcl.File) []string {
	body, ok := f.Body.(*hclsyntax.Body)
	if !ok {
		return nil
	}
	var names []string
	_ = hclsyntax.VisitAll(body, func(n hclsyntax.Node) hcl.Diagnostics {
		call, ok := n.(*hclsyntax.FunctionCallExpr)
		if !ok || call.Name != "env" || len(call.Args) == 0 {
			return nil
		}
		v, diags := call.Args[0].Value(nil)
		if !diags.HasErrors() && v.Type() == cty.String && v.IsKnown() && !v.IsNull() {
			names = append(names, v.AsString())
		}
		return nil
	})
	return names
}
