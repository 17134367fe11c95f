package pipefile

import (
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// schemas is a fixed set of endpoint types for the loader's tests.
type schemas struct{}

var sinkSchema = sdk.Schema{Storage: true, Attributes: []sdk.Attribute{
	{Name: "path", Type: sdk.String, Required: true, Key: true},
	{Name: "part_size", Type: sdk.Size, Default: int64(5 << 20)},
	{Name: "token", Type: sdk.String, Secret: true},
	{Name: "timeout", Type: sdk.Duration},
	{Name: "tags", Type: sdk.StringMap},
}}
var sourceSchema = sdk.Schema{Attributes: []sdk.Attribute{
	{Name: "path", Type: sdk.String, Required: true},
	{Name: "args", Type: sdk.StringList},
	{Name: "verbose", Type: sdk.Bool, Default: false},
	{Name: "jobs", Type: sdk.Number},
}}

func (schemas) Schema(kind, t string) (sdk.Schema, bool, error) {
	if kind == "source" {
		return sourceSchema, t == "src", nil
	}
	return sinkSchema, t == "dst", nil
}
func (schemas) Types(kind string) []string {
	if kind == "source" {
		return []string{"src"}
	}
	return []string{"dst"}
}
func (schemas) Pin(name, path, sha string) error { return nil }
func (schemas) Process(kind, typ string) string  { return "" }

func load(t *testing.T, src string, o Options) *File {
	t.Helper()
	o.Schemas = schemas{}
	if o.LookupEnv == nil {
		o.LookupEnv = func(string) (string, bool) { return "", false }
	}
	f, diags := LoadSource("t.hcl", []byte(src), o)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	return f
}

func TestDecodeTypes(t *testing.T) {
	f := load(t, `
variable "tok" {
  sensitive = true
  default   = "s3cr3t-token"
}
pipeline "p" {
  chunk_size = "2MiB"
  source "src" {
    path = "in"
    args = ["-a", upper("b")]
    jobs = 4
  }
  sink "dst" {
    path    = "out/"
    token   = var.tok
    timeout = "90s"
    tags    = { team = "db" }
  }
}`, Options{RunID: "r1"})
	p := f.Pipelines[0]
	if n, _ := p.Attrs.Int("chunk_size"); n != 2<<20 {
		t.Fatalf("chunk_size %d", n)
	}
	src := p.Source
	if got := strings.Join(src.Strings("args"), ","); got != "-a,B" {
		t.Fatalf("args %q", got)
	}
	if n, _ := src.Int("jobs"); n != 4 || src.Values["verbose"] != false {
		t.Fatalf("values %+v", src.Values)
	}
	sink := p.Sinks[0]
	if sink.Values["part_size"] != int64(5<<20) || sink.Values["timeout"] != 90*time.Second {
		t.Fatalf("defaults and durations: %+v", sink.Values)
	}
	if _, ok := sink.Values["path"]; ok {
		t.Fatal("the key attribute is rendered per stream, not passed as config")
	}
	if !sink.Sensitive["token"] || f.Secrets()[0] != "s3cr3t-token" {
		t.Fatalf("secrets %v, sensitive %v", f.Secrets(), sink.Sensitive)
	}
}

func TestKeyTemplates(t *testing.T) {
	for _, tc := range []struct {
		path, render, manifest string
		kind                   KeyKind
	}{
		{`"b/${pipeline.name}/${run.id}/"`, "b/p/r1/db/users.tsv.zst", "b/p/r1/pipe-manifest.json", KeyFolder},
		{`"b/${run.id}-${stream.name}${stream.ext}"`, "b/r1-db/users.tsv.zst", "b/r1-pipe-manifest.json", KeyPerStream},
		{`"b/dump.zst"`, "b/dump.zst", "b/dump.zst.pipe-manifest.json", KeyObject},
	} {
		f := load(t, `pipeline "p" {
  source "src" { path = "x" }
  sink "dst" { path = `+tc.path+` }
}`, Options{RunID: "r1"})
		k := f.Pipelines[0].Sinks[0].Key
		if k.Kind != tc.kind {
			t.Errorf("%s: kind %d, want %d", tc.path, k.Kind, tc.kind)
		}
		if got, err := k.Render("db/users.tsv", ".zst"); err != nil || got != tc.render {
			t.Errorf("%s: rendered %q %v, want %q", tc.path, got, err, tc.render)
		}
		if got, err := k.ManifestKey(); err != nil || got != tc.manifest || !IsManifest(got) {
			t.Errorf("%s: manifest %q %v, want %q", tc.path, got, err, tc.manifest)
		}
	}
	// Without a run id (validate, plan) a preview shows the placeholder.
	f := load(t, `pipeline "p" {
  source "src" { path = "x" }
  sink "dst" { path = "b/${run.id}/" }
}`, Options{})
	k := f.Pipelines[0].Sinks[0].Key
	if _, err := k.Render("a", ""); err == nil {
		t.Fatal("rendered a key whose run id is unknown")
	}
	if got, _ := k.Preview().Render("a", ".zst"); got != "b/${run.id}/a.zst" {
		t.Fatalf("preview %q", got)
	}
	if IsManifest("data/manifest.json") || !IsManifest("x/pipe-manifest.json") {
		t.Fatal("IsManifest")
	}
}

func TestVariablePrecedence(t *testing.T) {
	src := `variable "v" { default = "default" }
pipeline "p" {
  source "src" { path = var.v }
  sink "dst" { path = "o/" }
}`
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	for _, tc := range []struct {
		vars map[string]string
		env  map[string]string
		want string
	}{
		{nil, nil, "default"},
		{nil, map[string]string{"PIPE_VAR_v": "env"}, "env"},
		{map[string]string{"v": "flag"}, map[string]string{"PIPE_VAR_v": "env"}, "flag"},
	} {
		f := load(t, src, Options{Vars: tc.vars, LookupEnv: env(tc.env)})
		if got := f.Pipelines[0].Source.String("path"); got != tc.want {
			t.Errorf("vars %v env %v: %q, want %q", tc.vars, tc.env, got, tc.want)
		}
	}
}

func TestFunctions(t *testing.T) {
	now := time.Date(2026, 11, 21, 3, 4, 5, 0, time.UTC)
	f := load(t, `pipeline "p" {
  source "src" {
    path = env("DATA_DIR", "fallback")
    args = [timestamp(), formatdate("YYYY-MM-DD", timestamp()), basename("/a/b.sql"), join("-", ["x", "y"])]
  }
  sink "dst" { path = "o/" }
}`, Options{Now: now})
	src := f.Pipelines[0].Source
	if src.String("path") != "fallback" {
		t.Fatalf("env fallback: %q", src.String("path"))
	}
	if got := strings.Join(src.Strings("args"), " "); got != "2026-11-21T03:04:05Z 2026-11-21 b.sql x-y" {
		t.Fatalf("functions: %q", got)
	}
}

func TestParseSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int64
		warn bool
		err  bool
	}{
		{"8MiB", 8 << 20, false, false},
		{"8 mib", 8 << 20, false, false},
		{"512KiB", 512 << 10, false, false},
		{"1GiB", 1 << 30, false, false},
		{"4096", 4096, false, false},
		{"8MB", 8_000_000, true, false},
		{"1PB", 1e15, true, false},
		{"eight", 0, false, true},
		{"-1MiB", 0, false, true},
		{"", 0, false, true},
		{"2EiB", 0, false, true},
	} {
		n, warn, err := hclvalue.ParseSize(tc.in)
		if (err != nil) != tc.err || n != tc.n || (warn != "") != tc.warn {
			t.Errorf("%q: %d %q %v", tc.in, n, warn, err)
		}
	}
	_, warn, _ := hclvalue.ParseSize("1PB")
	if !strings.Contains(warn, `write "1PiB"`) {
		t.Errorf("advice: %s", warn)
	}
}

func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in  string
		n   int64
		err bool
	}{
		{"200MiB/s", 200 << 20, false},
		{" 1GiB/s ", 1 << 30, false},
		{"512 KiB/s", 512 << 10, false},
		{"100MB/s", 100_000_000, false},
		{"200MiB", 0, true},
		{"fast", 0, true},
		{"/s", 0, true},
		{"10B/s", 0, true},
	} {
		n, err := ParseRate(tc.in)
		if (err != nil) != tc.err || n != tc.n {
			t.Errorf("ParseRate(%q) = %d, %v", tc.in, n, err)
		}
	}
}

// The loader bounds what it accepts: hostile files draw a positioned
// diagnostic instead of running the parser out of stack or memory.
func TestLoaderLimits(t *testing.T) {
	big := strings.Repeat("# a comment line that pads the file out\n", hclvalue.MaxFileSize/40+1)
	for name, tc := range map[string]struct{ src, want string }{
		"60,000 [":        {"x = " + strings.Repeat("[", 60000), "too complex"},
		"65 nested [":     {`variable "x" { default = ` + strings.Repeat("[", 65) + strings.Repeat("]", 65) + " }", "nested too deeply"},
		"nested template": {`variable "x" { default = ` + strings.Repeat(`"${`, 40) + "1" + strings.Repeat(`}"`, 40) + " }", "nested too deeply"},
		"unary run":       {`variable "x" { default = ` + strings.Repeat("!", 70) + "true }", "nested too deeply"},
		"binary chain":    {`variable "x" { default = ` + strings.Repeat("1+", 30000) + "1 }", "too complex"},
		"size":            {big, "too large"},
	} {
		_, diags := LoadSource("hostile.hcl", []byte(tc.src), Options{Schemas: schemas{}})
		if !diags.HasErrors() || !strings.Contains(diags.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", name, diags, tc.want)
		}
		if _, diags := ParseSyntax("hostile.hcl", []byte(tc.src)); !diags.HasErrors() {
			t.Errorf("%s: ParseSyntax accepted it", name)
		}
	}
	// 64 levels are fine.
	ok := `variable "x" { default = ` + strings.Repeat("[", 60) + strings.Repeat("]", 60) + " }\n" + `pipeline "p" {
  source "src" { path = "in" }
  sink "dst" { path = "out/" }
}`
	if _, diags := LoadSource("ok.hcl", []byte(ok), Options{Schemas: schemas{}}); diags.HasErrors() {
		t.Errorf("60 levels: %v", diags)
	}
}
