package drill

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeDocker answers docker's commands as a docker with one container
// would: ready after readyAfter attempts, queries from answers.
type fakeDocker struct {
	calls      [][]string
	readyAfter int
	ready      int
	answers    map[string]string
	removed    bool
}

func (f *fakeDocker) run(ctx context.Context, argv []string) (string, error) {
	f.calls = append(f.calls, argv)
	switch argv[1] {
	case "run":
		return "0123abcd\n", nil
	case "port":
		return "127.0.0.1:49153\n", nil
	case "rm":
		f.removed = true
		return "", nil
	case "exec":
		q := argv[len(argv)-1]
		if q == "SELECT 1" || strings.Contains(q, "SELECT 1'") {
			if f.ready++; f.ready <= f.readyAfter {
				return "", errors.New("psql: error: connection refused")
			}
			return "1\n", nil
		}
		if a, ok := f.answers[q]; ok {
			return a, nil
		}
		return "", errors.New("ERROR: relation does not exist")
	}
	return "", errors.New("unknown command")
}

func TestStartWaitsAndConnects(t *testing.T) {
	f := &fakeDocker{readyAfter: 2}
	s, err := Start(context.Background(), "postgres", "postgres:15", Options{Run: f.run, Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if s.Port != 49153 || f.ready != 3 {
		t.Errorf("port %d after %d readiness checks", s.Port, f.ready)
	}
	run := strings.Join(f.calls[0], " ")
	for _, want := range []string{"docker run --detach --rm --name pipe-drill-", "--publish 127.0.0.1::5432", "--env POSTGRES_HOST_AUTH_METHOD=trust", " postgres:15"} {
		if !strings.Contains(run, want) {
			t.Errorf("docker run: %s, want %q in it", run, want)
		}
	}
	vals := map[string]any{"host": "db.internal", "password": "secret", "dsn": "postgres://x", "database": "shop"}
	s.Connect(vals)
	if vals["host"] != "127.0.0.1" || vals["port"] != int64(49153) || vals["user"] != "postgres" || vals["create"] != true || vals["no_owner"] != true {
		t.Errorf("connected: %v", vals)
	}
	if _, ok := vals["password"]; ok {
		t.Error("the production password stayed")
	}
	if _, ok := vals["dsn"]; ok {
		t.Error("the production dsn stayed")
	}
	cluster := map[string]any{"databases": []string{"*"}}
	s.Connect(cluster)
	if _, ok := cluster["create"]; ok {
		t.Error("a cluster restore creates its databases itself")
	}
	if err := s.Close(); err != nil || !f.removed {
		t.Errorf("close: %v, removed %v", err, f.removed)
	}
}

func TestStartGivesUp(t *testing.T) {
	f := &fakeDocker{readyAfter: 1 << 30}
	_, err := Start(context.Background(), "mysql", "mariadb:10.11", Options{Run: f.run, Wait: 700 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "did not take connections within 700ms") || !f.removed {
		t.Errorf("err %v, removed %v", err, f.removed)
	}
}

func TestStartRefusesOtherSinks(t *testing.T) {
	if _, err := Start(context.Background(), "fs", "x", Options{}); err == nil {
		t.Error("a drill into an fs sink started")
	}
}

func TestChecks(t *testing.T) {
	f := &fakeDocker{answers: map[string]string{
		"SELECT count(*) FROM orders": "1000\n",
		"SELECT a, b FROM t":          "1|x\n2|y\n",
		"SELECT name FROM t":          "alice\n",
	}}
	s, err := Start(context.Background(), "postgres", "postgres:15", Options{Run: f.run})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		check  Check
		ok     bool
		errSub string
	}{
		{Check{Name: "n", Query: "SELECT count(*) FROM orders", AtLeast: 1000, HasAtLeast: true}, true, ""},
		{Check{Name: "n", Query: "SELECT count(*) FROM orders", AtLeast: 1001, HasAtLeast: true}, false, ""},
		{Check{Name: "rows", Query: "SELECT a, b FROM t", Expect: "1|x\n2|y", HasExpect: true}, true, ""},
		{Check{Name: "rows", Query: "SELECT a, b FROM t", Expect: "1|x", HasExpect: true}, false, ""},
		{Check{Name: "nan", Query: "SELECT name FROM t", AtLeast: 1, HasAtLeast: true}, false, `the first value, "alice", is not a number`},
		{Check{Name: "runs", Query: "SELECT name FROM t"}, true, ""},
		{Check{Name: "missing", Query: "SELECT * FROM nope"}, false, "relation does not exist"},
	} {
		r := c.check.Run(context.Background(), s)
		if r.OK != c.ok || !strings.Contains(r.Error, c.errSub) {
			t.Errorf("%s (%q): %+v, want ok %v", c.check.Name, c.check.Query, r, c.ok)
		}
	}
}
