package runner_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/all"
	"github.com/pipebackup/pipe/plugins/host"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/runner"
)

// dbsType is a cluster restore like the postgres and mysql sinks': it
// restores the databases (<database>.dump) its databases attribute names
// ("*" for all), declines the others, and says which databases that
// failed in the backup it was asked for.
type dbsType struct{ restored *sync.Map }

func (dbsType) Schema() sdk.Schema {
	return sdk.Schema{Attributes: []sdk.Attribute{{Name: "databases", Type: sdk.StringList, Required: true}}}
}

func (t dbsType) Configure(ctx context.Context, cfg sdk.Config) (sdk.Sink, sdk.Diagnostics) {
	v, _ := cfg.Get("databases")
	return &dbsSink{include: v.([]string), restored: t.restored}, nil
}

type dbsSink struct {
	include  []string
	restored *sync.Map
}

func (s *dbsSink) picks(stream string) bool {
	db := strings.TrimSuffix(stream, ".dump")
	return slices.Contains(s.include, "*") || slices.Contains(s.include, db)
}

func (s *dbsSink) Prepare(context.Context, []sdk.Object) error { return nil }

func (s *dbsSink) PreparePartial(ctx context.Context, objs []sdk.Object, failed []string) ([]bool, error) {
	wanted := make([]bool, len(failed))
	for i, f := range failed {
		wanted[i] = s.picks(f)
	}
	return wanted, nil
}

func (s *dbsSink) Declines(objs []sdk.Object) []bool {
	out := make([]bool, len(objs))
	for i, o := range objs {
		out[i] = !s.picks(o.Stream)
	}
	return out
}

func (s *dbsSink) Create(ctx context.Context, obj sdk.Object) (sdk.ObjectWriter, error) {
	return &dbsWriter{name: obj.Stream, restored: s.restored}, nil
}

type dbsWriter struct {
	bytes.Buffer
	name     string
	restored *sync.Map
}

func (w *dbsWriter) Commit(context.Context) error {
	w.restored.Store(w.name, w.Len())
	return nil
}
func (w *dbsWriter) Abort(context.Context) error { return nil }

// A restore of a cluster's partial run names each database the backup
// lacks. Asked for all (a sink that does not choose, or "*"), or for one
// that failed, it restores the rest and fails naming it with the
// backup's error; asked only for databases the run holds, it succeeds
// and still names the ones not in the run.
func TestRestoreNamesWhatTheBackupLacks(t *testing.T) {
	dir := t.TempDir()
	st := filepath.Join(dir, "st")
	if _, err := runCluster(t, &cluster{dbs: []string{"shop", "billing", "crm"}, fail: map[string]bool{"billing": true}, independent: true}, st); err == nil {
		t.Fatal("the backup with a failing database succeeded")
	}
	restored := &sync.Map{}
	plugin := all.Builtin()
	plugin.Sinks["dbs"] = dbsType{restored: restored}
	reg, err := host.NewRegistry(plugin)
	if err != nil {
		t.Fatal(err)
	}
	restore := func(sink string) (*runner.Report, error) {
		t.Helper()
		runID := time.Now().UTC().Format("20060102T150405Z") + "-r"
		src := fmt.Sprintf("pipeline \"restore\" {\n  source \"fs\" { path = %q }\n  decompress {}\n  %s\n}\n", st+"/", sink)
		f, diags := pipefile.LoadSource("t.hcl", []byte(src), pipefile.Options{RunID: runID, Schemas: reg})
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		pl, diags := plan.New(f, plan.Options{Host: profiles.Host{CPUs: 2, Memory: 8 << 30}})
		if diags.HasErrors() {
			t.Fatal(diags.Error())
		}
		return runner.Run(context.Background(), pl.Pipelines[0], runner.Options{RunID: runID, Registry: reg})
	}
	restoredNames := func() []string {
		var out []string
		restored.Range(func(k, _ any) bool { out = append(out, k.(string)); return true })
		slices.Sort(out)
		restored.Clear()
		return out
	}
	wantMissing := func(what string, rep *runner.Report, err error) {
		t.Helper()
		var me *runner.MissingError
		if !errors.As(err, &me) || len(me.Missing) != 1 || me.Missing[0].Stream != "billing.dump" {
			t.Fatalf("%s: err = %v, want billing.dump named as missing", what, err)
		}
		if !strings.Contains(err.Error(), "billing.dump: ") || !strings.Contains(err.Error(), "(sensitive) denied") {
			t.Errorf("%s: the error does not give the backup's error for billing.dump: %v", what, err)
		}
		if rep == nil || strings.Join(rep.Missing, ",") != "billing.dump" || len(rep.FailedInBackup) != 1 {
			t.Errorf("%s: report missing %v, failed in backup %v", what, rep.Missing, rep.FailedInBackup)
		}
	}

	// A sink that does not choose restores all there is, and fails.
	out := filepath.Join(dir, "out")
	rep, err := restore(fmt.Sprintf("sink \"fs\" { path = %q }", out+"/"))
	wantMissing("into a folder", rep, err)
	for _, db := range []string{"shop", "crm"} {
		if _, err := os.Stat(filepath.Join(out, db+".dump")); err != nil {
			t.Errorf("into a folder: %s not restored: %v", db, err)
		}
	}

	// All of them, by pattern.
	rep, err = restore(`sink "dbs" { databases = ["*"] }`)
	wantMissing(`databases = ["*"]`, rep, err)
	if got := strings.Join(restoredNames(), " "); got != "crm.dump shop.dump" {
		t.Errorf(`databases = ["*"]: restored %s`, got)
	}

	// One present and the failed one, named.
	rep, err = restore(`sink "dbs" { databases = ["shop", "billing"] }`)
	wantMissing(`databases = ["shop", "billing"]`, rep, err)
	if got := strings.Join(restoredNames(), " "); got != "shop.dump" {
		t.Errorf(`databases = ["shop", "billing"]: restored %s`, got)
	}

	// Only databases the run holds: success, the failed one still named.
	rep, err = restore(`sink "dbs" { databases = ["shop"] }`)
	if err != nil {
		t.Fatalf(`databases = ["shop"]: %v`, err)
	}
	if len(rep.Missing) != 0 || len(rep.FailedInBackup) != 1 || rep.FailedInBackup[0].Stream != "billing.dump" {
		t.Errorf(`databases = ["shop"]: missing %v, failed in backup %v`, rep.Missing, rep.FailedInBackup)
	}
	if got := strings.Join(restoredNames(), " "); got != "shop.dump" {
		t.Errorf(`databases = ["shop"]: restored %s`, got)
	}
}
