package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pipebackup/pipe/plugins/sdk"
)

func TestConnKeepsThePasswordOffTheCommandLine(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      connConfig
		info     string
		password string
	}{
		{"url", connConfig{DSN: "postgres://alice:s3cr%20et@db.example:6432/sales?sslmode=require&application_name=nightly"},
			"application_name=nightly dbname=sales host=db.example port=6432 sslmode=require user=alice", "s3cr et"},
		{"key=value", connConfig{DSN: `host=db port=5432 user=bob password='it\'s \\ quoted' dbname='my db'`},
			`dbname='my db' host=db port=5432 user=bob`, `it's \ quoted`},
		{"attributes beat the dsn", connConfig{DSN: "postgres://u:dsnpass@h/a", Database: "b", Password: "attrpass", Port: 7000},
			"dbname=b host=h port=7000 user=u", "attrpass"},
		{"attributes only", connConfig{Host: "/var/run/postgresql", Database: "app", SSLMode: "disable"},
			"dbname=app host=/var/run/postgresql sslmode=disable", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, d := newConn(tc.cfg)
			if d.HasErrors() {
				t.Fatal(d.Err())
			}
			if c.info != tc.info || c.password != tc.password {
				t.Errorf("got info %q password %q, want %q %q", c.info, c.password, tc.info, tc.password)
			}
			argv := c.spec([]string{"pg_dump", "--dbname=" + c.info}, nil).Argv
			if tc.password != "" && strings.Contains(strings.Join(argv, " "), tc.password) {
				t.Errorf("the password is on the command line: %v", argv)
			}
			env := c.env(nil)
			if tc.password != "" && (len(env) != 1 || env[0] != "PGPASSWORD="+tc.password) {
				t.Errorf("env = %v, want PGPASSWORD", env)
			}
			// What the tools get parses back to the same settings.
			back, err := parseDSN(c.info)
			if err != nil || conninfo(back) != c.info {
				t.Errorf("conninfo does not round-trip: %v %q", err, conninfo(back))
			}
		})
	}
}

func TestConnErrorsNameTheAttribute(t *testing.T) {
	for _, tc := range []struct {
		cfg  connConfig
		attr string
		text string
	}{
		{connConfig{}, "", "no database given"},
		{connConfig{DSN: "host=a dbname='unterminated"}, "dsn", "unterminated"},
		{connConfig{DSN: "justtext"}, "dsn", "key=value"},
		{connConfig{Host: "h", Database: "d", Port: 70000}, "port", "invalid port"},
		{connConfig{Host: "h", Database: "d", SSLMode: "sometimes"}, "sslmode", "invalid sslmode"},
	} {
		_, d := newConn(tc.cfg)
		if !d.HasErrors() || d[0].Attribute != tc.attr || !strings.Contains(d.Err().Error(), tc.text) {
			t.Errorf("%+v: got %v, want an error on %q containing %q", tc.cfg, d, tc.attr, tc.text)
		}
	}
	// A URL that does not parse is reported without repeating it.
	_, d := newConn(connConfig{DSN: "postgres://u:topsecret@h:badport/db"})
	if !d.HasErrors() || strings.Contains(d.Err().Error(), "topsecret") {
		t.Errorf("bad URL: %v", d)
	}
}

func TestTableStreamNamesRoundTrip(t *testing.T) {
	for _, tc := range [][2]string{{"public", "events"}, {"Odd Schema", "Mixed.Case/Table"}, {"s", "100%"}, {"ü", "a b"}} {
		name := tableStream(tc[0], tc[1])
		s, tbl, ok := parseTableStream(name)
		if !ok || s != tc[0] || tbl != tc[1] {
			t.Errorf("%q → %q → %q %q %v", tc, name, s, tbl, ok)
		}
	}
	for _, bad := range []string{"pre-data.dump", "data/x.copy", "data/a/b/c.copy", "data/a/b.sql", "data//t.copy"} {
		if _, _, ok := parseTableStream(bad); ok {
			t.Errorf("%q parsed as a table stream", bad)
		}
	}
}

func TestPGOptionsEscapes(t *testing.T) {
	got := pgoptions(map[string]string{"synchronous_commit": "off", "search_path": `a b\c`})
	if want := `-c search_path=a\ b\\c -c synchronous_commit=off`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestConfigureRejects(t *testing.T) {
	base := map[string]any{"host": "h", "database": "d"}
	with := func(k string, v any) sdk.Config {
		m := map[string]any{}
		for k, v := range base {
			m[k] = v
		}
		m[k] = v
		return sdk.NewConfig(m)
	}
	for _, tc := range []struct {
		cfg  sdk.Config
		attr string
	}{
		{with("format", "directory"), "format"},
		{with("jobs", int64(0)), "jobs"},
		{with("pg_dump", "/nonexistent/pg_dump"), "pg_dump"},
	} {
		_, d := SourceType{}.Configure(context.Background(), withDefaults(SourceType{}.Schema(), tc.cfg))
		if !d.HasErrors() || d[0].Attribute != tc.attr {
			t.Errorf("source %v: got %v, want an error on %s", tc.cfg.Values(), d, tc.attr)
		}
	}
	plainJobs := sdk.NewConfig(map[string]any{"host": "h", "database": "d", "format": "plain", "jobs": int64(4)})
	if _, d := (SourceType{}).Configure(context.Background(), withDefaults(SourceType{}.Schema(), plainJobs)); !d.HasErrors() || d[0].Attribute != "jobs" {
		t.Errorf("plain with jobs = 4: %v", d)
	}
	noDB := sdk.NewConfig(map[string]any{"host": "h", "create": true})
	if _, d := (SinkType{}).Configure(context.Background(), withDefaults(SinkType{}.Schema(), noDB)); !d.HasErrors() || d[0].Attribute != "database" {
		t.Errorf("create without database: %v", d)
	}
}

// withDefaults fills in the schema's defaults as the host does.
func withDefaults(s sdk.Schema, c sdk.Config) sdk.Config {
	m := map[string]any{}
	for _, a := range s.Attributes {
		if a.Default != nil {
			m[a.Name] = a.Default
		}
	}
	for k, v := range c.Values() {
		m[k] = v
	}
	return sdk.NewConfig(m)
}

func TestChooseDatabases(t *testing.T) {
	all := []clusterDatabase{{name: "shop"}, {name: "postgres"}, {name: "app_a"}, {name: "app_b"}, {name: "odd name/ü"}, {name: "test_x"}}
	names := func(dbs []clusterDatabase) string {
		var out []string
		for _, d := range dbs {
			out = append(out, d.name)
		}
		return strings.Join(out, ",")
	}
	for _, tc := range []struct {
		include, exclude []string
		want, err        string
	}{
		{[]string{"*"}, nil, "shop,app_a,app_b,odd name/ü,test_x", ""},
		{[]string{"*", "postgres"}, []string{"test_*"}, "shop,postgres,app_a,app_b,odd name/ü", ""},
		{[]string{"app_*"}, []string{"app_b"}, "app_a", ""},
		{[]string{"odd name/ü"}, nil, "odd name/ü", ""},
		{[]string{"nosuch"}, nil, "", `"nosuch" is not a database of the server`},
		{[]string{"zz*"}, nil, "", "names none of the server's databases"},
		{[]string{"*"}, []string{"*"}, "", "names none"},
	} {
		got, err := chooseDatabases(all, tc.include, tc.exclude, maintenanceDB)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v - %v: err = %v, want %q", tc.include, tc.exclude, err, tc.err)
			}
			continue
		}
		if err != nil || names(got) != tc.want {
			t.Errorf("%v - %v: %s (%v), want %s", tc.include, tc.exclude, names(got), err, tc.want)
		}
	}
}

func TestClusterStreamNames(t *testing.T) {
	for _, db := range []string{"shop", "odd name/ü", "100%", "a.b"} {
		if got := streamDatabase(escapeName(db) + ".dump"); got != db {
			t.Errorf("%q: stream %q reads back as %q", db, escapeName(db)+".dump", got)
		}
	}
	for _, s := range []string{streamGlobals, "data/public/t.copy", "x.tar", "pre-data"} {
		if db := streamDatabase(s); db != "" {
			t.Errorf("%q is not a database's stream, read as %q", s, db)
		}
	}
	sink := func(include ...string) *Sink {
		return &Sink{c: sinkConfig{Jobs: 2}, cluster: &clusterSink{include: include}}
	}
	s := sink("shop", "app_*")
	objs := []sdk.Object{{Stream: streamGlobals}, {Stream: "shop.dump"}, {Stream: "app_1.dump"}, {Stream: "crm.dump"}}
	if err := s.clusterPrepare(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	c := s.cluster
	if c.globalsDone == nil || !c.picks("shop") || !c.picks("app_1") || c.picks("crm") {
		t.Errorf("globals %v, picks shop %v app_1 %v crm %v", c.globalsDone != nil, c.picks("shop"), c.picks("app_1"), c.picks("crm"))
	}
	if err := sink("billing").clusterPrepare(context.Background(), objs); err == nil || !strings.Contains(err.Error(), `"billing" is not in the run`) {
		t.Errorf("a database not in the run: %v", err)
	}
	if err := sink("zz*").clusterPrepare(context.Background(), objs); err == nil || !strings.Contains(err.Error(), "picks none") {
		t.Errorf("a pattern that picks nothing: %v", err)
	}
}

// A cluster backup with jobs names each database's streams under the
// database; the restore routes them to a parallel-mode restore of that
// database, and does not read those of databases it does not pick.
func TestClusterParallelStreams(t *testing.T) {
	for _, db := range []string{"shop", "odd name/ü", "100%"} {
		for _, name := range []string{streamPreData, streamSequences, streamPostData, tableStream("public", "a b")} {
			stream := escapeName(db) + "/" + name
			if got, in, ok := parallelStream(stream); !ok || got != db || in != name {
				t.Errorf("%q reads back as %q, %q, %v", stream, got, in, ok)
			}
			if streamDatabase(stream) != "" {
				t.Errorf("%q read as a whole database's dump", stream)
			}
		}
	}
	for _, s := range []string{"shop.dump", "shop/other.dump", "shop/data/x.copy", "/pre-data.dump", streamPreData} {
		if db, _, ok := parallelStream(s); ok {
			t.Errorf("%q is not a stream of a database read table by table, read as %q", s, db)
		}
	}
	s := &Sink{c: sinkConfig{Jobs: 3}, conn: conn{info: "host=db dbname=postgres", database: "postgres"}, cluster: &clusterSink{include: []string{"shop"}}}
	objs := []sdk.Object{{Stream: streamGlobals}, {Stream: "shop/pre-data.dump"}, {Stream: "shop/sequences.sql"}, {Stream: "shop/data/public/a.copy"},
		{Stream: "shop/data/public/b.copy"}, {Stream: "shop/post-data.dump"}, {Stream: "crm/pre-data.dump"}, {Stream: "crm/data/public/a.copy"}, {Stream: "hr.dump"}}
	if err := s.clusterPrepare(context.Background(), objs); err != nil {
		t.Fatal(err)
	}
	if got := s.Declines(objs); fmt.Sprint(got) != "[false false false false false false true true true]" {
		t.Errorf("declines %v: want crm's and hr's streams only", got)
	}
	d := s.cluster.parallel["shop"]
	if len(s.cluster.parallel) != 1 || d == nil {
		t.Fatalf("parallel restores %v, want shop's", s.cluster.parallel)
	}
	if !d.hasPre || d.conn.database != "shop" || d.parent != s || d.c.Jobs != 3 {
		t.Errorf("shop's restore: schema first %v, database %q, jobs %d", d.hasPre, d.conn.database, d.c.Jobs)
	}
	// Its data waits for the schema: a table's load started before it
	// would find no table.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := s.Create(ctx, sdk.Object{Stream: "shop/data/public/a.copy"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a table's data before the schema: %v, want a wait", err)
	}
	if w, err := s.Create(ctx, sdk.Object{Stream: "crm/data/public/a.copy"}); err != nil || w != (discard{}) {
		t.Errorf("a database not picked: %v, %v", w, err)
	}
	// Without databases, such a run is refused before anything is
	// restored, with what to write.
	one := &Sink{c: sinkConfig{Jobs: 1}, preDone: make(chan struct{})}
	if err := one.Prepare(context.Background(), objs); err == nil || !strings.Contains(err.Error(), `databases = ["shop"]`) {
		t.Errorf("a cluster backup into one database: %v", err)
	}
}
