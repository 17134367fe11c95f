package host

import (
	"context"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

type fakeSource struct{ schema sdk.Schema }

func (f fakeSource) Schema() sdk.Schema { return f.schema }
func (fakeSource) Configure(context.Context, sdk.Config) (sdk.Source, sdk.Diagnostics) {
	return nil, nil
}

func TestRegistry(t *testing.T) {
	ok := fakeSource{sdk.Schema{Attributes: []sdk.Attribute{{Name: "path", Type: sdk.String}}}}
	a := sdk.Plugin{Name: "a", Sources: map[string]sdk.SourceType{"x": ok, "y": ok}}
	r, err := NewRegistry(a)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.Types("source"), ","); got != "x,y" {
		t.Fatalf("types %s", got)
	}
	if _, found, err := r.Schema("source", "x"); !found || err != nil {
		t.Fatalf("x not found: %v", err)
	}
	if s, err := r.Sink("x"); s != nil || err != nil {
		t.Fatal("x is not a sink")
	}
	b := sdk.Plugin{Name: "b", Sources: map[string]sdk.SourceType{"x": ok}}
	if _, err := NewRegistry(a, b); err == nil || !strings.Contains(err.Error(), "plugins a and b both provide source \"x\"") {
		t.Fatalf("err = %v", err)
	}
	bad := sdk.Plugin{Name: "c", Sources: map[string]sdk.SourceType{"z": fakeSource{sdk.Schema{Attributes: []sdk.Attribute{{Name: "", Type: sdk.String}}}}}}
	if _, err := NewRegistry(bad); err == nil || !strings.Contains(err.Error(), "plugin c: source \"z\"") {
		t.Fatalf("err = %v", err)
	}
}
