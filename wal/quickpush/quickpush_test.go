package quickpush

import (
	"reflect"
	"strings"
	"testing"
)

func TestParsePush(t *testing.T) {
	for _, c := range []struct {
		args string
		ok   bool
		want push
	}{
		{"push /etc/pg.hcl pg_wal/000000010000000000000001", true, push{command: "push", file: "/etc/pg.hcl", path: "pg_wal/000000010000000000000001", pgdata: "."}},
		{"push --archive main -D /data --var a=b pg.hcl p", true, push{command: "push", file: "pg.hcl", path: "p", archive: "main", pgdata: "/data", vars: []string{"a=b"}}},
		{"push pg.hcl --archive=main --pgdata=/data p --var=a=b --var c=d", true, push{command: "push", file: "pg.hcl", path: "p", archive: "main", pgdata: "/data", vars: []string{"a=b", "c=d"}}},
		{"push pg.hcl -- -p", true, push{command: "push", file: "pg.hcl", path: "-p", pgdata: "."}},
		{"fetch pg.hcl 000000010000000000000001 pg_wal/RECOVERYXLOG", true, push{command: "fetch", file: "pg.hcl", name: "000000010000000000000001", path: "pg_wal/RECOVERYXLOG", pgdata: "."}},
		{"fetch -D /data pg.hcl 000000010000000000000001 p", true, push{command: "fetch", file: "pg.hcl", name: "000000010000000000000001", path: "p", pgdata: "/data"}},
		// pipe's to answer: other commands and flags, missing values,
		// a wrong number of arguments.
		{"fetch pg.hcl 000000010000000000000001", false, push{}},
		{"fetch pg.hcl 000000010000000000000001 p --prefetch-after x", false, push{}},
		{"list pg.hcl", false, push{}},
		{"push pg.hcl p --log-level info", false, push{}},
		{"push pg.hcl p --metrics-textfile m.prom", false, push{}},
		{"push --background pg.hcl", false, push{}},
		{"push pg.hcl p --archive", false, push{}},
		{"push pg.hcl", false, push{}},
		{"push pg.hcl p q", false, push{}},
		{"", false, push{}},
	} {
		got, ok := parsePush(strings.Fields(c.args))
		if ok != c.ok || (ok && !reflect.DeepEqual(got, c.want)) {
			t.Errorf("%q: %+v %v, want %+v %v", c.args, got, ok, c.want, c.ok)
		}
	}
}

// TestDelegate: what pipe-wal cannot hand over is an error, not a loop or
// a silent exit. (The hand-over itself, an exec, is the script test's.)
func TestDelegate(t *testing.T) {
	// Run as pipe by a pipe-wal installed under pipe's name.
	if err := delegate([]string{"wal", "push", "pg.hcl", "p"}); err == nil || !strings.Contains(err.Error(), "pipe-wal itself") {
		t.Errorf("handed to itself: %v", err)
	}
	// No pipe beside the test binary, none on PATH.
	t.Setenv("PATH", t.TempDir())
	if err := delegate([]string{"push", "pg.hcl", "p"}); err == nil || !strings.Contains(err.Error(), "neither beside pipe-wal nor on PATH") {
		t.Errorf("no pipe: %v", err)
	}
}

// A fetch pipe-wal can neither answer nor hand over (no pipe to run)
// must not exit 1, which restore_command's caller takes for "not
// archived": recovery would end there, early. A push may.
func TestMainWithoutPipe(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	dir := t.TempDir()
	for args, want := range map[string]int{"fetch pg.hcl 000000010000000000000001 p": 255, "push pg.hcl p": 1} {
		got := Main(append(strings.Fields(args), "--pgdata", dir))
		if got != want {
			t.Errorf("pipe-wal %s without pipe: exit %d, want %d", args, got, want)
		}
	}
}
