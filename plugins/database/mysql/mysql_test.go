package mysql

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pipebackup/pipe/plugins/sdk"
)

var ctx = context.Background()

// nasty is a password with every character an option file or a URL treats
// specially.
const nasty = `p#ss "w'rd"\ ;x=1 tab	end `

func TestSchemas(t *testing.T) {
	for name, s := range map[string]sdk.Schema{"source": SourceType{}.Schema(), "sink": SinkType{}.Schema()} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		for _, a := range s.Attributes {
			if (a.Name == "password" || a.Name == "dsn") != a.Secret {
				t.Errorf("%s: %s: Secret = %v", name, a.Name, a.Secret)
			}
		}
		if s.Storage {
			t.Errorf("%s: a database is no storage", name)
		}
	}
}

func TestParseDSN(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want dsn
		err  string
	}{
		{in: "mysql://backup:s3cret@db.example.com:3307/shop", want: dsn{host: "db.example.com", port: 3307, user: "backup", password: "s3cret", database: "shop"}},
		{in: "mariadb://root@10.0.0.5/", want: dsn{host: "10.0.0.5", port: 3306, user: "root"}},
		{in: "mysql://u:p%23%3F%40%2F%25@[::1]:3306/my%20db", want: dsn{host: "::1", port: 3306, user: "u", password: "p#?@/%", database: "my db"}},
		{in: "mysql://h", want: dsn{host: "h", port: 3306}},
		{in: "postgres://u:hunter22@h/db", err: "does not start with mysql://"},
		{in: "u:hunter22@tcp(h:3306)/db", err: "does not start with mysql://"},
		{in: "mysql:///db", err: "names no host"},
		{in: "mysql://u:hunter22@h:99999/db", err: "port is not a number"},
		{in: "mysql://u:hunter22@h:x/db", err: "not a URL"},
		{in: "mysql://u:hunter22@h/db?tls=true", err: `"?" or "#" part`},
		{in: "mysql://u:hunter22@h/a/b", err: "more than one database"},
		{in: "mysql://u:hunter22%zz@h/db", err: "not a URL"},
	} {
		got, err := parseDSN(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.err)
			} else if strings.Contains(err.Error(), "hunter22") {
				t.Errorf("%s: the error shows the password: %v", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

// fake writes stand-ins for the client programs into a folder of their
// own: each records its arguments, its option file and the file's mode in
// log, then runs body.
func fake(t *testing.T, dir, name, log, body string) string {
	t.Helper()
	script := `#!/bin/sh
case "$1:$0" in --help:*mariadb) echo "  --print-query-on-error  Print the query if there was an error."; exit 0;; --help:*) exit 0;; esac
L=` + log + `
printf '%s\n' "$@" > "$L/` + name + `.args"
f="${1#--defaults-extra-file=}"
cp "$f" "$L/` + name + `.cnf"
stat -c %a "$f" > "$L/` + name + `.mode"
echo "$f" > "$L/` + name + `.path"
` + body + "\n"
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

type bench struct {
	bin, log string
}

func newBench(t *testing.T) bench {
	b := bench{bin: t.TempDir(), log: t.TempDir()}
	return b
}

func (b bench) read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(b.log, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// checkRun checks what a fake program recorded: the option file came
// first, was private, held the password, and is gone.
func (b bench) checkRun(t *testing.T, prog, password string) []string {
	t.Helper()
	args := strings.Split(strings.TrimSuffix(b.read(t, prog+".args"), "\n"), "\n")
	if !strings.HasPrefix(args[0], "--defaults-extra-file=") {
		t.Errorf("%s: the first argument is %q, not --defaults-extra-file", prog, args[0])
	}
	for _, a := range args {
		if strings.Contains(a, password) {
			t.Errorf("%s: the password is on the command line: %q", prog, a)
		}
	}
	if m := strings.TrimSpace(b.read(t, prog+".mode")); m != "600" {
		t.Errorf("%s: the option file has mode %s", prog, m)
	}
	if !strings.Contains(b.read(t, prog+".cnf"), "password="+quoteOption(password)+"\n") {
		t.Errorf("%s: the option file holds no password:\n%s", prog, b.read(t, prog+".cnf"))
	}
	if p := strings.TrimSpace(b.read(t, prog+".path")); fileExists(p) {
		t.Errorf("%s: the option file %s is still there", prog, p)
	}
	return args
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// configured configures an endpoint with vals, or fails the test.
func configured[T any](t *testing.T, configure func(context.Context, sdk.Config) (T, sdk.Diagnostics), vals map[string]any) T {
	t.Helper()
	x, d := configure(ctx, sdk.NewConfig(vals))
	if d.HasErrors() {
		t.Fatal(d.Err())
	}
	return x
}

func configureSource(t *testing.T, vals map[string]any) *Source {
	t.Helper()
	return configured(t, SourceType{}.Configure, vals).(*Source)
}

// configureSink configures a sink and prepares it, as the host does before
// the first object.
func configureSink(t *testing.T, vals map[string]any) *Sink {
	t.Helper()
	s := configured(t, SinkType{}.Configure, vals).(*Sink)
	if err := s.Prepare(ctx, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSourceDumps(t *testing.T) {
	b := newBench(t)
	dump := fake(t, b.bin, "mariadb-dump", b.log, `echo "-- dump of $(eval echo \${$#})"`)
	client := fake(t, b.bin, "mariadb", b.log, `cat > "$L/mariadb.stdin"; printf '10.11.19-MariaDB\t65142784\n'`)
	s := configureSource(t, map[string]any{"host": "db", "user": "backup", "password": nasty, "database": "shop",
		"dump_command": dump, "client_command": client, "routines": true, "triggers": true, "events": false,
		"dump_args": []string{"--ignore-table=shop.sessions"}})
	infos, _ := s.Streams(ctx)
	if len(infos) != 1 || infos[0].Name != "shop.sql" || infos[0].Size != -1 {
		t.Fatalf("streams %+v", infos)
	}
	facts, err := s.Describe(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"server_version": "10.11.19-MariaDB", "database": "shop", "size_bytes": "65142784"}; !reflect.DeepEqual(facts, want) {
		t.Errorf("facts %v", facts)
	}
	b.checkRun(t, "mariadb", nasty)
	if q := b.read(t, "mariadb.stdin"); !strings.Contains(q, "X'73686f70'") {
		t.Errorf("the query does not name shop in hex:\n%s", q)
	}

	r, err := s.Open(ctx, "shop.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := r.(sdk.FileReader); !ok {
		t.Error("the dump is no sdk.FileReader: the plugin boundary would copy it through messages")
	}
	out, _ := io.ReadAll(r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if string(out) != "-- dump of shop\n" {
		t.Errorf("stream %q", out)
	}
	args := b.checkRun(t, "mariadb-dump", nasty)
	want := []string{"--single-transaction", "--quick", "--no-tablespaces", "--default-character-set=binary",
		"--max-allowed-packet=1073741824", "--routines", "--triggers", "--skip-events", "--ignore-table=shop.sessions", "--", "shop"}
	if !reflect.DeepEqual(args[1:], want) {
		t.Errorf("arguments %q\nwant %q", args[1:], want)
	}
	cnf := b.read(t, "mariadb-dump.cnf")
	for _, line := range []string{"[client]", `user="backup"`, `host="db"`, "port=3306", "protocol=tcp"} {
		if !strings.Contains(cnf, line+"\n") {
			t.Errorf("the option file lacks %s:\n%s", line, cnf)
		}
	}
	if _, err := s.Open(ctx, "other.sql"); err == nil {
		t.Error("Open of an unknown stream succeeded")
	}
}

// Cluster mode: the server's databases (its own skipped by patterns),
// largest first, each a stream of its own that creates its database.
func TestSourceSeveralDatabases(t *testing.T) {
	b := newBench(t)
	dump := fake(t, b.bin, "mysqldump", b.log, `echo dump`)
	// VERSION(), then each schema (hex) and its size: b, "odd db/x", mysql, a, test_1.
	client := fake(t, b.bin, "mysql", b.log, `cat >/dev/null; printf '8.0.36\n62\t900\n6F64642064622F78\t500\n6D7973716C\t300\n61\t100\n746573745F31\t50\n'`)
	s := configureSource(t, map[string]any{"dsn": "mysql://root:" + "pw%23123@db:3307", "databases": []string{"*"}, "exclude_databases": []string{"test_*"},
		"dump_command": dump, "client_command": client, "routines": false, "triggers": false, "events": true})
	infos, err := s.Streams(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, in := range infos {
		names = append(names, in.Name)
	}
	if strings.Join(names, " ") != "b.sql odd%20db%2Fx.sql a.sql" {
		t.Fatalf("streams %v", names)
	}
	if !s.Independent() {
		t.Error("a cluster backup's streams do not stand alone")
	}
	facts, err := s.Describe(ctx)
	if err != nil || facts["databases"] != "3" || facts["size_bytes"] != "1500" || facts["server_version"] != "8.0.36" {
		t.Fatalf("facts %v, %v", facts, err)
	}
	r, err := s.Open(ctx, "odd%20db%2Fx.sql")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(r)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	args := b.checkRun(t, "mysqldump", "pw#123")
	// MySQL 8: utf8mb4, binary strings in hex (its JSON refuses binary).
	if !slices.Contains(args, "--hex-blob") || !slices.Contains(args, "--default-character-set=utf8mb4") {
		t.Errorf("a MySQL dump's arguments %q", args)
	}
	if tail := strings.Join(args[len(args)-6:], " "); tail != "--skip-routines --skip-triggers --events --databases -- odd db/x" {
		t.Errorf("arguments end in %s", tail)
	}
	if _, err := s.Open(ctx, "mysql.sql"); err == nil {
		t.Error("opened a database the patterns skip")
	}
	if cnf := b.read(t, "mysqldump.cnf"); !strings.Contains(cnf, "port=3307\n") || !strings.Contains(cnf, `user="root"`) {
		t.Errorf("option file:\n%s", cnf)
	}
}

func TestDescribeMissingDatabase(t *testing.T) {
	b := newBench(t)
	dump := fake(t, b.bin, "mariadb-dump", b.log, "")
	client := fake(t, b.bin, "mariadb", b.log, `cat >/dev/null; printf '10.11.19-MariaDB\t0\n0\n'`)
	s := configureSource(t, map[string]any{"host": "db", "user": "bk", "database": "nope", "dump_command": dump, "client_command": client})
	_, err := s.Describe(ctx)
	if err == nil || err.Error() != `database "nope" does not exist on the server, or user "bk" may not see it` {
		t.Fatalf("err = %v", err)
	}
	// In cluster mode a name the server does not show is an error before
	// a byte moves.
	client = fake(t, b.bin, "mariadb", b.log, `cat >/dev/null; printf '10.11.19-MariaDB\n73686F70\t10\n'`)
	s = configureSource(t, map[string]any{"host": "db", "user": "bk", "databases": []string{"shop", "nope"}, "dump_command": dump, "client_command": client})
	if _, err := s.Streams(ctx); err == nil || !strings.Contains(err.Error(), `"nope" is not a database of the server`) || !strings.Contains(err.Error(), `user "bk"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestCharsetArgs(t *testing.T) {
	for v, want := range map[string][]string{
		"10.11.19-MariaDB-0+deb12u1": {"--default-character-set=binary"},
		"11.4.2-MariaDB-log":         {"--default-character-set=binary"},
		"8.0.36":                     {"--hex-blob", "--default-character-set=utf8mb4"},
		"5.7.44-log":                 {"--hex-blob", "--default-character-set=utf8mb4"},
		"":                           {"--hex-blob", "--default-character-set=utf8mb4"},
	} {
		if got := charsetArgs(v); !reflect.DeepEqual(got, want) {
			t.Errorf("charsetArgs(%q) = %q, want %q", v, got, want)
		}
	}
}

// A failing program's error carries its message, never the password.
func TestFailuresCarryTheMessage(t *testing.T) {
	b := newBench(t)
	dump := fake(t, b.bin, "mariadb-dump", b.log, "echo '-- partial'; echo \"mariadb-dump: Error 2013: Lost connection to server during query when dumping table \\`big\\` at row: 5120 (password $(grep password \"$f\"))\" >&2; exit 2")
	client := fake(t, b.bin, "mariadb", b.log, `cat >/dev/null; echo "ERROR 1045 (28000): Access denied for user 'bk'@'10.0.0.1' (using password: YES) hunter2hunter2" >&2; exit 1`)
	s := configureSource(t, map[string]any{"host": "db", "user": "bk", "password": "hunter2hunter2", "database": "shop", "dump_command": dump, "client_command": client})
	_, err := s.Describe(ctx)
	if err == nil || !strings.Contains(err.Error(), "mariadb exited with status 1: ERROR 1045 (28000): Access denied for user 'bk'") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "hunter2hunter2") {
		t.Fatalf("the error shows the password: %v", err)
	}
	r, err := s.Open(ctx, "shop.sql")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(r)
	err = r.Close()
	if err == nil || !strings.Contains(err.Error(), "mariadb-dump exited with status 2: mariadb-dump: Error 2013: Lost connection to server during query when dumping table `big`") {
		t.Fatalf("err = %v", err)
	}
	if strings.Contains(err.Error(), "hunter2hunter2") {
		t.Fatalf("the error shows the password: %v", err)
	}
	// The client could not tell the server's version: the dump writes
	// what every server reads.
	if args := b.checkRun(t, "mariadb-dump", "hunter2hunter2"); !slices.Contains(args, "--hex-blob") {
		t.Errorf("arguments %q without the version", args)
	}
}

// The errors of a new client against an old server, and of an old client
// fed a new dump, say what to do: MariaDB 11.4+'s programs refuse a
// server without TLS, and clients before 10.5.25 (10.6.18, 10.11.8,
// 11.4.2) stop at the sandbox line newer dumps start with.
func TestClientErrorsSayWhatToDo(t *testing.T) {
	b := newBench(t)
	const tls = `echo "ERROR 2026 (HY000): TLS/SSL error: SSL is required, but the server does not support it" >&2; exit 1`
	dump := fake(t, b.bin, "mariadb-dump", b.log, `echo "mariadb-dump: Got error: 2026: \"TLS/SSL error: SSL is required, but the server does not support it\" when trying to connect" >&2; exit 2`)
	client := fake(t, b.bin, "mariadb", b.log, `cat >/dev/null; `+tls)
	const hint = `MariaDB's client programs from 11.4 on require TLS unless told otherwise: give the server a certificate (ssl_cert and ssl_key), or, on a network you trust, set client_options = { "disable-ssl-verify-server-cert" = "" }`
	s := configureSource(t, map[string]any{"host": "db", "password": "pw-secret", "database": "shop", "dump_command": dump, "client_command": client})
	if _, err := s.Describe(ctx); err == nil || !strings.Contains(err.Error(), "SSL is required, but the server does not support it; "+hint) {
		t.Errorf("Describe: %v", err)
	}
	r, err := s.Open(ctx, "shop.sql")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(r)
	if err := r.Close(); err == nil || !strings.Contains(err.Error(), "mariadb-dump exited with status 2: mariadb-dump: Got error: 2026") || !strings.Contains(err.Error(), hint) {
		t.Errorf("the dump: %v", err)
	}

	old := fake(t, t.TempDir(), "mariadb", b.log, `head -c 40 >/dev/null; echo "ERROR at line 1: Unknown command '\\-'." >&2; exit 1`)
	sink := configureSink(t, map[string]any{"host": "db", "database": "shop", "client_command": old})
	w, err := sink.Create(ctx, sdk.Object{Key: "shop.sql", Stream: "shop.sql", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = io.WriteString(w, "/*M!999999\\- enable the sandbox mode */ \n-- MariaDB dump 10.19-11.8.9-MariaDB\n"); err == nil {
		err = w.Commit(ctx)
	}
	if err == nil || !strings.Contains(err.Error(), `mariadb exited with status 1: ERROR at line 1: Unknown command '\-'.; the dump starts by turning on the client's sandbox mode, which mariadb-dump does from MariaDB 10.5.25, 10.6.18, 10.11.8 and 11.4.2 on and older clients do not know: restore with a mariadb client of those versions or later (client_command)`) {
		t.Errorf("the restore: %v", err)
	}
	// Other errors stay as they are.
	if got := explain("ERROR 1045 (28000): Access denied for user 'bk'@'10.0.0.1' (using password: YES)"); got != "" {
		t.Errorf("explain(access denied) = %q", got)
	}
}

// Closing the dump before its end (a failed run) stops it and removes the
// option file.
func TestSourceCloseEarly(t *testing.T) {
	b := newBench(t)
	dump := fake(t, b.bin, "mariadb-dump", b.log, `exec yes`)
	client := fake(t, b.bin, "mariadb", b.log, "")
	s := configureSource(t, map[string]any{"socket": "/run/mysqld/mysqld.sock", "password": "pw-1234", "database": "shop", "dump_command": dump, "client_command": client})
	r, err := s.Open(ctx, "shop.sql")
	if err != nil {
		t.Fatal(err)
	}
	io.ReadFull(r, make([]byte, 1<<16))
	r.Close()
	b.checkRun(t, "mariadb-dump", "pw-1234")
	if cnf := b.read(t, "mariadb-dump.cnf"); !strings.Contains(cnf, "socket=\"/run/mysqld/mysqld.sock\"\nprotocol=socket\n") || strings.Contains(cnf, "host=") {
		t.Errorf("option file:\n%s", cnf)
	}
}

func TestSinkRestores(t *testing.T) {
	b := newBench(t)
	client := fake(t, b.bin, "mariadb", b.log, `
case "$(cat)" in
CREATE*) cp "$L/mariadb.args" "$L/create.args"; exit 0;;
*DROP*) exit 0;;
esac
echo "ERROR 1359 (HY000) at line 92: Trigger 'restored.orders_ai' already exists" >&2; exit 1`)
	s := configureSink(t, map[string]any{"dsn": "mariadb://root:" + "s3cret-pw@db/we%60ird", "create_database": true, "client_command": client})
	w, err := s.Create(ctx, sdk.Object{Key: "shop.sql", Stream: "shop.sql", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := w.(sdk.FileWriter); !ok {
		t.Error("the restore is no sdk.FileWriter: the plugin boundary would copy it through messages")
	}
	io.WriteString(w, "DROP TABLE IF EXISTS t;\n")
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	args := b.checkRun(t, "mariadb", "s3cret-pw")
	want := []string{"--batch", "--default-character-set=utf8mb4", "--max-allowed-packet=1073741824", "--skip-print-query-on-error", "--database=we`ird"}
	if !reflect.DeepEqual(args[1:], want) {
		t.Errorf("arguments %q\nwant %q", args[1:], want)
	}
	if a := b.read(t, "create.args"); strings.Contains(a, "--database") {
		t.Errorf("CREATE DATABASE ran in the database it creates:\n%s", a)
	}

	// A statement the server rejects fails the object with its message.
	w, err = s.Create(ctx, sdk.Object{Key: "shop.sql", Stream: "shop.sql", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100 && err == nil; i++ {
		_, err = w.Write([]byte(strings.Repeat("INSERT INTO t VALUES (1);\n", 1000)))
	}
	if err == nil {
		err = w.Commit(ctx)
	}
	w.Abort(ctx)
	if err == nil || !strings.Contains(err.Error(), "mariadb exited with status 1: ERROR 1359 (HY000) at line 92: Trigger 'restored.orders_ai' already exists") {
		t.Fatalf("err = %v", err)
	}
	b.checkRun(t, "mariadb", "s3cret-pw")
}

// MySQL's client knows no --skip-print-query-on-error.
func TestSinkMySQLClient(t *testing.T) {
	b := newBench(t)
	client := fake(t, b.bin, "mysql", b.log, `cat > /dev/null`)
	s := configureSink(t, map[string]any{"host": "db", "port": int64(3307), "client_command": client, "client_options": map[string]string{"ssl-ca": "/etc/ca.pem", "ssl-verify-server-cert": ""}})
	w, err := s.Create(ctx, sdk.Object{Key: "all.sql", Stream: "all.sql", Size: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	args := b.read(t, "mysql.args")
	if strings.Contains(args, "print-query") || strings.Contains(args, "--database") {
		t.Errorf("arguments:\n%s", args)
	}
	cnf := b.read(t, "mysql.cnf")
	if !strings.Contains(cnf, "port=3307\nprotocol=tcp\nssl-ca=\"/etc/ca.pem\"\nssl-verify-server-cert\n") || strings.Contains(cnf, "password") {
		t.Errorf("option file:\n%s", cnf)
	}
}

// The real client reads back every value pipe writes, whatever it holds.
func TestOptionFileQuoting(t *testing.T) {
	client, err := exec.LookPath("mariadb")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("mariadb is not installed; make test-deps installs it (mariadb-client)")
		}
		t.Skip("mariadb is not installed")
	}
	c := conn{Host: " h#st ", Port: 3306, User: `us"er;`, Password: nasty + "\n\\n\r\\", Options: map[string]string{"ssl-ca": `/tmp/a b#c\d`}}
	file, remove, err := c.optionFile()
	if err != nil {
		t.Fatal(err)
	}
	defer remove()
	out, err := exec.Command(client, "--defaults-extra-file="+file, "--print-defaults").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{" --host=" + c.Host + " ", " --user=" + c.User + " ", " --password=" + c.Password + " ", " --port=3306 ", " --protocol=tcp ", " --ssl-ca=" + c.Options["ssl-ca"]} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%s reads the file differently: %q not in\n%q", client, want, out)
		}
	}
	remove()
	if fileExists(file) {
		t.Error("remove left the file")
	}
}

func TestConfigureErrors(t *testing.T) {
	b := newBench(t)
	dump := fake(t, b.bin, "mariadb-dump", b.log, "")
	client := fake(t, b.bin, "mariadb", b.log, "")
	progs := map[string]any{"dump_command": dump, "client_command": client}
	with := func(m map[string]any) map[string]any {
		out := map[string]any{}
		for k, v := range progs {
			out[k] = v
		}
		for k, v := range m {
			out[k] = v
		}
		return out
	}
	for _, tc := range []struct {
		name, attr, want string
		sink             bool
		vals             map[string]any
	}{
		{name: "no server", attr: "host", want: "no server to connect to", vals: with(map[string]any{"database": "shop"})},
		{name: "sink no server", sink: true, attr: "host", want: "no server to connect to", vals: with(nil)},
		{name: "dsn and host", attr: "host", want: "host is set beside dsn", vals: with(map[string]any{"dsn": "mysql://u:hunter22@h/db", "host": "h"})},
		{name: "bad dsn", attr: "dsn", want: "invalid dsn", vals: with(map[string]any{"dsn": "u:hunter22@tcp(h)/db"})},
		{name: "sink bad dsn", sink: true, attr: "dsn", want: "invalid dsn", vals: with(map[string]any{"dsn": "mysql://u:hunter22@h:port/db"})},
		{name: "password twice", attr: "password", want: "password is set twice", vals: with(map[string]any{"dsn": "mysql://u:hunter22@h/db", "password": "x"})},
		{name: "no database", attr: "database", want: "no database to dump", vals: with(map[string]any{"host": "h"})},
		{name: "database and databases", attr: "database", want: "database and databases are both set", vals: with(map[string]any{"host": "h", "database": "a", "databases": []string{"b"}})},
		{name: "dsn database and databases", attr: "dsn", want: "database and databases are both set", vals: with(map[string]any{"dsn": "mysql://h/a", "databases": []string{"b"}})},
		{name: "database twice", attr: "databases", want: `database "b" is listed twice`, vals: with(map[string]any{"host": "h", "databases": []string{"b", "b"}})},
		{name: "host and socket", attr: "socket", want: "host and socket are both set", vals: with(map[string]any{"host": "h", "socket": "/s", "database": "a"})},
		{name: "bad port", attr: "port", want: "port 70000 is out of range", vals: with(map[string]any{"host": "h", "port": int64(70000), "database": "a"})},
		{name: "reserved option", attr: "client_options", want: `option "password" is set by pipe`, vals: with(map[string]any{"host": "h", "database": "a", "client_options": map[string]string{"password": "hunter22"}})},
		{name: "bad option", attr: "client_options", want: `"a b" is not an option name`, vals: with(map[string]any{"host": "h", "database": "a", "client_options": map[string]string{"a b": "1"}})},
		{name: "password in dump_args", attr: "dump_args", want: "a password in dump_args", vals: with(map[string]any{"host": "h", "database": "a", "dump_args": []string{"-phunter22"}})},
		{name: "option file in dump_args", attr: "dump_args", want: "--defaults-file=/x in dump_args", vals: with(map[string]any{"host": "h", "database": "a", "dump_args": []string{"--defaults-file=/x"}})},
		{name: "no dump program", attr: "dump_command", want: `cannot run "no-such-dump-xyz"`, vals: with(map[string]any{"host": "h", "database": "a", "dump_command": "no-such-dump-xyz"})},
		{name: "no client program", sink: true, attr: "client_command", want: `cannot run "/nonexistent/mariadb"`, vals: with(map[string]any{"host": "h", "client_command": "/nonexistent/mariadb"})},
		{name: "create without database", sink: true, attr: "create_database", want: "no database to create", vals: with(map[string]any{"host": "h", "create_database": true})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var d sdk.Diagnostics
			if tc.sink {
				_, d = SinkType{}.Configure(ctx, sdk.NewConfig(tc.vals))
			} else {
				_, d = SourceType{}.Configure(ctx, sdk.NewConfig(tc.vals))
			}
			if !d.HasErrors() {
				t.Fatal("no error")
			}
			if d[0].Attribute != tc.attr || !strings.Contains(d[0].Summary, tc.want) {
				t.Errorf("got %s: %s (%s); want %s: %s", d[0].Attribute, d[0].Summary, d[0].Detail, tc.attr, tc.want)
			}
			if strings.Contains(d.Err().Error(), "hunter22") {
				t.Errorf("the error shows the password: %v", d.Err())
			}
		})
	}
}

// Without dump_command and client_command, pipe takes whichever programs
// are on PATH, and says what to install when there are none.
func TestDefaultPrograms(t *testing.T) {
	b := newBench(t)
	t.Setenv("PATH", b.bin)
	_, d := SourceType{}.Configure(ctx, sdk.NewConfig(map[string]any{"host": "h", "database": "a"}))
	if len(d) != 2 || d[0].Attribute != "dump_command" || d[0].Summary != "neither mariadb-dump nor mysqldump is on PATH" ||
		d[1].Attribute != "client_command" || !strings.Contains(d[1].Detail, "apt-get install mariadb-client") {
		t.Fatalf("diagnostics %+v", d)
	}
	fake(t, b.bin, "mysqldump", b.log, "")
	fake(t, b.bin, "mysql", b.log, "")
	s := configureSource(t, map[string]any{"host": "h", "database": "a"})
	if s.dump != filepath.Join(b.bin, "mysqldump") || s.client != filepath.Join(b.bin, "mysql") {
		t.Errorf("programs %s, %s", s.dump, s.client)
	}
	fake(t, b.bin, "mariadb-dump", b.log, "")
	fake(t, b.bin, "mariadb", b.log, "")
	s = configureSource(t, map[string]any{"host": "h", "database": "a"})
	if s.dump != filepath.Join(b.bin, "mariadb-dump") || s.client != filepath.Join(b.bin, "mariadb") {
		t.Errorf("programs %s, %s", s.dump, s.client)
	}
}

// A cluster restore runs each picked database's stream without a
// database of its own (the stream creates and selects it) and skips the
// others without starting the client.
func TestSinkClusterRestore(t *testing.T) {
	b := newBench(t)
	client := fake(t, b.bin, "mariadb", b.log, `cat > "$L/restored.sql"`)
	s := configureSink(t, map[string]any{"host": "db", "user": "root", "databases": []string{"shop", "odd*"}, "client_command": client})
	for _, stream := range []string{"shop.sql", "odd%20db%2Fx.sql", "crm.sql"} {
		os.Remove(filepath.Join(b.log, "restored.sql"))
		w, err := s.Create(ctx, sdk.Object{Key: stream, Stream: stream, Size: -1})
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, "USE x;\n")
		if err := w.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		_, err = os.Stat(filepath.Join(b.log, "restored.sql"))
		if restored := err == nil; restored != (stream != "crm.sql") {
			t.Errorf("%s: restored %v", stream, restored)
		}
	}
	if args := b.read(t, "mariadb.args"); strings.Contains(args, "--database") {
		t.Errorf("a cluster restore chose a database for the stream:\n%s", args)
	}
	if _, err := s.Create(ctx, sdk.Object{Key: "all.sql", Stream: "data/x.sql", Size: -1}); err == nil {
		t.Error("a stream that is no database's was accepted")
	}
	if _, d := (SinkType{}).Configure(ctx, sdk.NewConfig(map[string]any{"host": "db", "database": "a", "databases": []string{"*"}, "client_command": client})); !d.HasErrors() || !strings.Contains(d.Err().Error(), "databases with database") {
		t.Errorf("database beside databases: %v", d.Err())
	}
}
