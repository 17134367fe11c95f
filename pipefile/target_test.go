package pipefile

import (
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// pitrSchemas has a storage source ("store") and a sink with a point in
// time ("pitr"), as a base backup's restore has.
type pitrSchemas struct{ schemas }

func (pitrSchemas) Schema(kind, t string) (sdk.Schema, bool, error) {
	if kind == "source" {
		return sdk.Schema{Storage: true, Attributes: []sdk.Attribute{{Name: "path", Type: sdk.String, Required: true}}}, t == "store", nil
	}
	return sdk.Schema{Attributes: []sdk.Attribute{{Name: "target_time", Type: sdk.String, Target: true}, {Name: "target_lsn", Type: sdk.String, Target: true}}}, t == "pitr", nil
}

func TestTargetPicksTheRun(t *testing.T) {
	file := func(source, target string) string {
		return `pipeline "r" {
  source "store" {
    path = "backups/"
    ` + source + `
  }
  sink "pitr" { ` + target + ` }
}`
	}
	loadWith := func(src string) (*File, string) {
		f, diags := LoadSource("t.hcl", []byte(src), Options{Schemas: pitrSchemas{}, LookupEnv: func(string) (string, bool) { return "", false }})
		if !diags.HasErrors() {
			return f, ""
		}
		return f, diags.Error()
	}
	f, errs := loadWith(file("", `target_time = "2026-11-26 10:00:00+01"`))
	if errs != "" {
		t.Fatal(errs)
	}
	sel := f.Pipelines[0].Source.Selection
	if sel.Target == nil || !sel.Target.Time.Equal(time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)) || sel.Target.Attribute != "target_time" || !sel.Before.IsZero() || sel.RunID != "" {
		t.Errorf("the target picks runs before %+v (selection %+v)", sel.Target, sel)
	}
	// A run named on purpose is chosen, and still checked against the
	// target.
	f, _ = loadWith(file(`run = "20261120T000000Z-abcd"`, `target_time = "2026-11-26 10:00:00+01"`))
	if s := f.Pipelines[0].Source.Selection; !s.Before.IsZero() || s.RunID == "" || s.Target == nil {
		t.Errorf("run and target: %+v", s)
	}
	// A WAL position.
	f, errs = loadWith(file("", `target_lsn = "16/B374D848"`))
	if s := f.Pipelines[0].Source.Selection; errs != "" || s.Target == nil || s.Target.LSN != 0x16_B374D848 || !s.Target.Time.IsZero() {
		t.Errorf("a WAL position: %+v %s", s.Target, errs)
	}
	_, errs = loadWith(file("", `target_time = "2026-11-26 10:00"`))
	if !strings.Contains(errs, "t.hcl:6,31") || !strings.Contains(errs, "zone") {
		t.Errorf("a target without its zone: %s", errs)
	}
	_, errs = loadWith(file("", `target_lsn = "16/B374D84G"`))
	if !strings.Contains(errs, "t.hcl:6,30") || !strings.Contains(errs, "not a WAL position") {
		t.Errorf("a WAL position that is not one: %s", errs)
	}
}
