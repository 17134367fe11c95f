package integration

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// mariaClusterFile backs up every database of a MariaDB server, each a
// stream of its own, and restores the ones restore names into another.
const mariaClusterFile = s3Vars + `
variable "db_host" {}
variable "db_port" {}
variable "target_host" {}
variable "target_port" {}
variable "root_password" { sensitive = true }
variable "streams" { default = 2 }
variable "restore" {
  type    = list(string)
  default = ["*"]
}

pipeline "backup" {
  streams = var.streams
  source "mysql" {
    host      = var.db_host
    port      = var.db_port
    user      = "root"
    password  = var.root_password
    databases = ["*"]
    exclude_databases = ["scratch"]
  }
  compress { codec = "zstd" }
  checksum {}
  SINK
}

pipeline "restore" {
  streams = 2
  SOURCE
  decompress {}
  sink "mysql" {
    host      = var.target_host
    port      = var.target_port
    user      = "root"
    password  = var.root_password
    databases = var.restore
  }
}
`

// TestMySQLCluster backs up every database of a MariaDB server in one
// run, each on its own snapshot: one dropped mid-run is reported failed
// by name while the others are stored; the restore of one chosen
// database, then of all, into another server gives the same tables
// (CHECKSUM TABLE) and the shop's view, trigger and routines. It runs on
// every version of mariadbVersions, from a server to one of its version.
func TestMySQLCluster(t *testing.T) {
	for _, v := range mariadbVersions {
		t.Run(v, func(t *testing.T) { testMySQLCluster(t, v) })
	}
}

func testMySQLCluster(t *testing.T, version string) {
	m := startMariaDB(t, version)
	target := startMariaDB(t, version)
	b := newS3Bench(t)
	m.loadShop(t)
	dbs := []string{"crm", "odd db", "doomed", "scratch"}
	for _, db := range dbs {
		rows := 200_000 // dumped after the shop, before "doomed": time for the drop
		if db == "doomed" {
			rows = 10 // the smallest: dumped last
		}
		m.sql(t, fmt.Sprintf("CREATE DATABASE `%[1]s`; CREATE TABLE `%[1]s`.items (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(64), qty INT) ENGINE=InnoDB;"+
			" INSERT INTO `%[1]s`.items (name, qty) SELECT CONCAT('item ', seq), seq %% 97 FROM `%[1]s`.seq_1_to_%[2]d;", db, rows))
	}
	dir := t.TempDir()
	hcl := strings.NewReplacer("SINK", s3Block("sink", `key = "cluster/${pipeline.name}/${run.id}/"`),
		"SOURCE", s3Block("source", `prefix = "cluster/backup/"`)).Replace(mariaClusterFile)
	writeFile(t, filepath.Join(dir, "p.hcl"), []byte(hcl))
	bucket := b.bucket(t, "mysql-cluster")
	env := b.env(bucket, b.m.Endpoint, "PIPE_VAR_db_host="+m.Host, "PIPE_VAR_db_port="+m.Port,
		"PIPE_VAR_target_host="+target.Host, "PIPE_VAR_target_port="+target.Port, "PIPE_VAR_root_password="+mariaRootPassword)

	// One database at a time, largest first: "doomed" is dropped while
	// the shop is dumped.
	start := time.Now()
	w := startPipe(t, dir, append(env, "PIPE_VAR_streams=1"), "run", "p.hcl", "--pipeline", "backup", "--json")
	w.moved(t, "source", "out", 1)
	m.sql(t, "DROP DATABASE doomed")
	res := w.wait()
	t.Logf("cluster backup in %s", time.Since(start).Round(time.Millisecond))
	if res.Err == nil {
		t.Fatalf("the backup succeeded though a database was dropped mid-run:\n%s", res.Stderr)
	}
	if f := onePipeline(t, res.Stdout).Failed; len(f) != 1 || f[0].Stream != "doomed.sql" || !strings.Contains(f[0].Error, "Unknown database") {
		t.Errorf("failed streams %+v, want doomed.sql (Unknown database)", f)
	}
	mf := b.readManifest(t, bucket, "cluster/backup/")
	var stored []string
	for _, o := range mf.Objects {
		stored = append(stored, o.Stream)
	}
	if len(stored) != 3 || stored[0] != "shop.sql" || !slices.Contains(stored, "crm.sql") || !slices.Contains(stored, "odd%20db.sql") {
		t.Errorf("stored %v, want the shop first (the largest), crm and odd db; scratch excluded", stored)
	}
	if strings.Contains(res.Stdout+res.Stderr, mariaRootPassword) {
		t.Error("the root password appears in the backup's output")
	}

	// One chosen database, then all of them, into the other server.
	r0 := mustPipe(t, dir, append(env, `PIPE_VAR_restore=["crm"]`), "run", "p.hcl", "--pipeline", "restore")
	if !strings.Contains(r0.Stderr, "not in run     not asked for, and not in the run (each failed in the backup): doomed.sql") {
		t.Errorf("restoring crm alone does not name doomed.sql as failed in the backup:\n%s", r0.Stderr)
	}
	user := "SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') ORDER BY 1"
	if got := strings.Fields(target.sql(t, user)); strings.Join(got, " ") != "crm shop" { // shop: the image's own, empty
		t.Fatalf("after restoring crm alone the server has %v", got)
	}
	// All of them: those the run holds are restored, and the run exits 1
	// naming doomed, which it lacks.
	r := runPipe(t, dir, env, "run", "p.hcl", "--pipeline", "restore")
	if r.Err == nil || !strings.Contains(r.Stderr, "missing        asked for, not in the run (each failed in the backup): doomed.sql") ||
		!strings.Contains(r.Stderr, "doomed.sql: ") || !strings.Contains(r.Stderr, "Unknown database") {
		t.Errorf("restoring all of a partial run: %v, want exit 1 naming doomed.sql and its error\n%s", r.Err, r.Stderr)
	}
	if got := target.sql(t, user); got != "crm\nodd db\nshop" {
		t.Fatalf("restored databases %q", got)
	}
	for _, db := range []string{"shop", "crm", "odd db"} {
		tables := strings.Fields(m.sql(t, fmt.Sprintf("SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY 1", sqlString(db))))
		if len(tables) == 0 {
			t.Fatalf("%s has no tables", db)
		}
		for _, table := range tables {
			q := fmt.Sprintf("CHECKSUM TABLE `%s`.`%s`", db, table)
			if w, g := m.sql(t, q), target.sql(t, q); w != g {
				t.Errorf("%s.%s: %q on the original, %q restored", db, table, w, g)
			}
		}
	}
	objects := "SELECT (SELECT COUNT(*) FROM information_schema.views WHERE table_schema = 'shop'), (SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = 'shop'), (SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = 'shop')"
	if n := target.sql(t, objects); n != "1\t1\t2" {
		t.Errorf("the restored shop has %q views, triggers and routines, want 1, 1 and 2", n)
	}
}
