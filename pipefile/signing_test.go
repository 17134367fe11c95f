package pipefile

import (
	"strings"
	"testing"
)

// sign and trust decode in pipelines and archives; the signing key is a
// secret; a second block of a kind, and trust on a source that is not a
// store, are errors at their position; the wal commands leave unread the
// blocks whose keys they must not need.
func TestSignAndTrust(t *testing.T) {
	const key = "-----BEGIN PRIVATE KEY-----\nnot-checked-here\n-----END PRIVATE KEY-----\n"
	f := load(t, `
variable "k" { default = "`+strings.ReplaceAll(key, "\n", `\n`)+`" }
pipeline "p" {
  source "src" { path = "in" }
  sign { key = var.k }
  sink "dst" { path = "out/" }
}
archive "a" {
  store "dst" { path = "wal/" }
  sign { key = var.k }
  trust { keys = ["pub1", "pub2"] }
}
`, Options{})
	p := f.Pipelines[0]
	if p.Sign == nil || p.Sign.String("key") != key || !p.Sign.Sensitive["key"] || p.Trust != nil {
		t.Fatalf("pipeline: sign %+v, trust %+v", p.Sign, p.Trust)
	}
	if secrets := f.Secrets(); len(secrets) == 0 || secrets[0] != key {
		t.Fatalf("the signing key is not among the file's secrets: %q", secrets)
	}
	a := f.Archives[0]
	if a.Sign == nil || a.Trust == nil || len(a.Trust.Strings("keys")) != 2 || a.Trust.ElemRange("keys", 1).Start.Column <= a.Trust.ElemRange("keys", 0).Start.Column {
		t.Fatalf("archive: sign %+v, trust %+v", a.Sign, a.Trust)
	}

	archive := `archive "a" {
  store "dst" { path = "wal/" }
  sign { key = file("nosuch.key") }
  trust { keys = [file("nosuch.pub")] }
}
`
	// Push reads the signing key, never the trusted keys' files; fetch,
	// list and verify the other way round.
	for name, tc := range map[string]struct {
		o    Options
		want string
	}{
		"push":  {Options{SkipTrust: true, Running: true}, "nosuch.key"},
		"fetch": {Options{SkipSign: true, Running: true}, "nosuch.pub"},
	} {
		tc.o.Schemas = schemas{}
		_, diags := LoadSource("t.hcl", []byte(archive), tc.o)
		if !diags.HasErrors() || !strings.Contains(diags.Error(), tc.want) || len(diags) != 1 {
			t.Errorf("%s: %v, want one error about %s", name, diags, tc.want)
		}
	}

	for name, tc := range map[string]struct{ src, want string }{
		"two signs": {`pipeline "p" {
  source "src" { path = "in" }
  sign { key = "a" }
  sign { key = "b" }
  sink "dst" { path = "out/" }
}`, `t.hcl:4,3-7: Duplicate sign block; Pipeline "p" already has a sign block at t.hcl:3:3.`},
		"trust on a source that is not a store": {`pipeline "p" {
  source "src" { path = "in" }
  trust { keys = ["a"] }
  sink "dst" { path = "out/" }
}`, `t.hcl:3,3-8: Nothing to trust; Pipeline "p" reads src, not runs from a store`},
		"no key": {`pipeline "p" {
  source "src" { path = "in" }
  sign {}
  sink "dst" { path = "out/" }
}`, `Missing required argument`},
	} {
		_, diags := LoadSource("t.hcl", []byte(tc.src), Options{Schemas: schemas{}})
		if !strings.Contains(diags.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", name, diags, tc.want)
		}
	}
}
