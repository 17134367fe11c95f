package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// drillOutcome is pipe drill --json's report, the parts the tests read.
type drillOutcome struct {
	OK             bool    `json:"ok"`
	RunID          string  `json:"run_id"`
	Error          string  `json:"error"`
	RestoreSeconds float64 `json:"restore_seconds"`
	Checks         []struct {
		Check string `json:"check"`
		OK    bool   `json:"ok"`
		Got   string `json:"got"`
	} `json:"checks"`
	Server *struct {
		Container string `json:"container"`
	} `json:"scratch_server"`
}

func drillResult(t *testing.T, r result) drillOutcome {
	t.Helper()
	var o drillOutcome
	if err := json.Unmarshal([]byte(r.Stdout), &o); err != nil {
		t.Fatalf("pipe drill --json printed no report: %v\n%s\n%s", err, r.Stdout, r.Stderr)
	}
	return o
}

// needDockerCLI: pipe drill runs the docker CLI, which the Docker engine
// the other tests reach through its socket does not need; in CI a
// missing CLI fails the test, elsewhere it skips.
func needDockerCLI(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("docker"); err != nil {
		unavailable(t, "the docker CLI is not installed (apt-get install docker.io); pipe drill runs it")
	}
}

// scratchLeft counts the drills' containers still there.
func scratchLeft(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("docker", "ps", "--all", "--quiet", "--filter", "label=pipe.drill=1").Output()
	if err != nil {
		t.Fatal(err)
	}
	return len(strings.Fields(string(out)))
}

// TestDrillPostgres backs up a database of postgres:15 and drills it: a
// scratch postgres:15 gets the restore, the checks and pg_amcheck pass, the
// webhook hears drill_success, and the scratch server is gone. A check
// that does not hold fails the drill (exit 1, drill_failure); --keep
// leaves the server running.
func TestDrillPostgres(t *testing.T) {
	requireDocker(t) // skips under -short first
	needDockerCLI(t)
	s := startPostgres(t)
	s.exec(t, "app",
		"CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, total numeric(10,2))",
		"CREATE INDEX orders_customer ON orders (customer)",
		"INSERT INTO orders SELECT g, 'c' || (g % 97), g / 7.0 FROM generate_series(1, 20000) g")
	var want string // what the check must find in the copy: the original's
	q := "SELECT sum(id), count(DISTINCT customer), sum(total) FROM orders"
	if err := s.connect(t, "app").QueryRow(context.Background(), "SELECT concat_ws('|', sum(id), count(DISTINCT customer), sum(total)) FROM orders").Scan(&want); err != nil {
		t.Fatal(err)
	}
	rc := newEventReceiver(t)
	dir := t.TempDir()
	file := fmt.Sprintf(`
variable "pw" {
  sensitive = true
}
notify "ops" {
  webhook = %q
  on      = ["drill_success", "drill_failure"]
}
pipeline "backup" {
  source "postgres" {
    host     = %q
    port     = %s
    user     = "pipe"
    password = var.pw
    database = "app"
  }
  compress {}
  sink "fs" { path = "st/${run.id}/" }
}
pipeline "restore" {
  source "fs" { path = "st/" }
  decompress {}
  sink "postgres" {
    host     = "db.internal"
    user     = "pipe"
    password = var.pw
    database = "app"
  }
}
drill "app" {
  pipeline = "restore"
  image    = %q
  amcheck  = true
  check "rows" {
    query    = "SELECT count(*) FROM orders"
    at_least = 20000
  }
  check "content" {
    query  = %q
    expect = %q
  }
}
drill "wrong" {
  pipeline = "restore"
  image    = %q
  check "rows" {
    query  = "SELECT count(*) FROM orders"
    expect = "20001"
  }
}
`, rc.url, s.Host, s.Port, postgresImage, q, want, postgresImage)
	writeFile(t, filepath.Join(dir, "p.hcl"), []byte(file))
	env := []string{"PIPE_VAR_pw=" + pgPassword}
	backup := mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup", "--json")
	before := scratchLeft(t)

	r := runPipe(t, dir, env, "drill", "p.hcl", "--drill", "app", "--json", "--metrics-textfile", "drill.prom")
	o := drillResult(t, r)
	if r.Err != nil || !o.OK || o.RunID == "" || !strings.Contains(backup.Stdout, o.RunID) || o.RestoreSeconds <= 0 || len(o.Checks) != 3 {
		t.Fatalf("drill: %v %+v\n%s\n%s", r.Err, o, r.Stdout, r.Stderr)
	}
	for _, c := range o.Checks {
		if !c.OK {
			t.Errorf("check %s failed: %q", c.Check, c.Got)
		}
	}
	if got := rc.take(); got != "drill_success" {
		t.Errorf("the webhook heard %q, want drill_success", got)
	}
	prom, err := os.ReadFile(filepath.Join(dir, "drill.prom"))
	if err != nil || !strings.Contains(string(prom), `pipe_drill_success{pipeline="restore"} 1`) {
		t.Errorf("metrics: %v\n%s", err, prom)
	}
	if strings.Contains(r.Stdout+r.Stderr, pgPassword) {
		t.Error("the drill printed the password")
	}
	if n := scratchLeft(t); n != before {
		t.Errorf("%d scratch servers left, want %d", n, before)
	}

	r = runPipe(t, dir, env, "drill", "p.hcl", "--drill", "wrong", "--json", "--keep")
	o = drillResult(t, r)
	if r.Err == nil || o.OK || len(o.Checks) != 1 || o.Checks[0].Got != "20000" || !strings.Contains(o.Error, "checks failed: rows") {
		t.Fatalf("a check that does not hold: %v %+v\n%s", r.Err, o, r.Stderr)
	}
	if got := rc.take(); got != "drill_failure" {
		t.Errorf("the webhook heard %q, want drill_failure", got)
	}
	if o.Server == nil || scratchLeft(t) != before+1 {
		t.Fatalf("--keep: %+v, %d servers", o.Server, scratchLeft(t))
	}
	if out, err := exec.Command("docker", "rm", "--force", o.Server.Container).CombinedOutput(); err != nil {
		t.Fatalf("docker rm: %v: %s", err, out)
	}
}

// TestDrillMariaDB drills a MariaDB dump into a scratch MariaDB server.
func TestDrillMariaDB(t *testing.T) {
	requireDocker(t) // skips under -short first
	needDockerCLI(t)
	m := startMariaDB(t, "10.11")
	m.loadShop(t)
	want := m.sql(t, "SELECT COUNT(*), SUM(id) FROM shop.orders")
	dir := t.TempDir()
	file := fmt.Sprintf(`
variable "pw" {
  sensitive = true
}
pipeline "backup" {
  source "mysql" {
    host     = %q
    port     = %s
    user     = "root"
    password = var.pw
    database = "shop"
  }
  compress {}
  sink "fs" { path = "st/${run.id}/" }
}
pipeline "restore" {
  source "fs" { path = "st/" }
  decompress {}
  sink "mysql" {
    host     = "db.internal"
    user     = "root"
    password = var.pw
    database = "shop"
  }
}
drill "shop" {
  pipeline = "restore"
  image    = "mariadb:10.11"
  check "orders" {
    query  = "SELECT COUNT(*), SUM(id) FROM orders"
    expect = %q
  }
}
`, m.Host, m.Port, strings.ReplaceAll(want, "\t", "|"))
	writeFile(t, filepath.Join(dir, "p.hcl"), []byte(file))
	env := []string{"PIPE_VAR_pw=" + mariaRootPassword}
	mustPipe(t, dir, env, "run", "p.hcl", "--pipeline", "backup")
	r := runPipe(t, dir, env, "drill", "p.hcl", "--json")
	if o := drillResult(t, r); r.Err != nil || !o.OK || len(o.Checks) != 1 || !o.Checks[0].OK {
		t.Fatalf("drill: %v %+v\n%s\n%s", r.Err, o, r.Stdout, r.Stderr)
	}
}
