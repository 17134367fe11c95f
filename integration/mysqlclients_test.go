package integration

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
)

// mariaInsideFile is the pipeline file pipe runs inside a MariaDB
// container, with the container's own mariadb-dump and mariadb: one
// database backed up to /backup and restored into another, and the whole
// server backed up and restored over itself.
const mariaInsideFile = `
variable "host" {}
variable "user" { default = "root" }
variable "password" { sensitive = true }
variable "root_password" { sensitive = true }
variable "database" { default = "shop" }
variable "target" { default = "restored" }
variable "from" { default = "" }
variable "options" {
  type    = map(string)
  default = {}
}

pipeline "backup" {
  source "mysql" {
    host           = var.host
    user           = var.user
    password       = var.password
    database       = var.database
    client_options = var.options
  }
  compress { codec = "zstd" }
  checksum {}
  sink "fs" { path = "/backup/${var.database}/${run.id}/" }
}

pipeline "restore" {
  source "fs" { path = var.from != "" ? var.from : "/backup/${var.database}/" }
  decompress {}
  sink "mysql" {
    host            = var.host
    user            = "root"
    password        = var.root_password
    database        = var.target
    create_database = true
    client_options  = var.options
  }
}

pipeline "server" {
  streams = 2
  source "mysql" {
    host      = var.host
    user      = "root"
    password  = var.root_password
    databases = ["*"]
  }
  compress { codec = "zstd" }
  sink "fs" { path = "/backup/server/${run.id}/" }
}

pipeline "server-restore" {
  streams = 2
  source "fs" { path = "/backup/server/" }
  decompress {}
  sink "mysql" {
    host      = var.host
    user      = "root"
    password  = var.root_password
    databases = ["*"]
  }
}
`

// startMariaDBWithPipe starts a MariaDB server of version with pipe
// (built without cgo: 10.5's image is Debian bullseye, whose C library is
// older than the host's) and mariaInsideFile in its container.
func startMariaDBWithPipe(t *testing.T, version string) *mariaServer {
	t.Helper()
	requireDocker(t)
	return startMariaDB(t, version, testcontainers.WithFiles(
		testcontainers.ContainerFile{HostFilePath: staticPipe(t), ContainerFilePath: "/usr/local/bin/pipe", FileMode: 0o755},
		testcontainers.ContainerFile{Reader: strings.NewReader(mariaInsideFile), ContainerFilePath: "/etc/pipe/maria.hcl", FileMode: 0o644},
	))
}

// inside runs a command in the container with env and returns its exit
// code and output.
func (m *mariaServer) inside(t *testing.T, env []string, argv ...string) (int, string) {
	t.Helper()
	code, r, err := m.c.Exec(context.Background(), argv, tcexec.Multiplexed(), tcexec.WithEnv(env))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(r)
	return code, string(out)
}

// pipeInside runs `pipe run /etc/pipe/maria.hcl --pipeline pipeline`
// in the container, against the server at host, with vars (name=value),
// and returns its exit code and output.
func (m *mariaServer) pipeInside(t *testing.T, host, pipeline string, vars ...string) (int, string) {
	t.Helper()
	env := []string{"PIPE_VAR_host=" + host, "PIPE_VAR_password=" + mariaRootPassword, "PIPE_VAR_root_password=" + mariaRootPassword}
	for _, v := range vars {
		env = append(env, "PIPE_VAR_"+v)
	}
	return m.inside(t, env, "pipe", "run", "/etc/pipe/maria.hcl", "--pipeline", pipeline)
}

func (m *mariaServer) mustPipeInside(t *testing.T, host, pipeline string, vars ...string) string {
	t.Helper()
	code, out := m.pipeInside(t, host, pipeline, vars...)
	if code != 0 {
		t.Fatalf("pipe run --pipeline %s %v in the container: exit %d\n%s", pipeline, vars, code, out)
	}
	return out
}

// clientVersion is what the container's mariadb-dump says of itself.
func (m *mariaServer) clientVersion(t *testing.T) string {
	t.Helper()
	_, out := m.inside(t, nil, "mariadb-dump", "--version")
	return strings.TrimSpace(out)
}

// TestMySQLClients runs pipe where each MariaDB server's own client
// programs are: in its container, with that version's mariadb-dump and
// mariadb, as an operator does who runs pipe on the database's machine or
// in its image (the other MariaDB tests run the host's, 10.11's, against
// every version). On 10.5 and 11.8, whose clients are not the host's: one
// database backed up by a user with the least privileges and restored
// beside it, equal to the original, the beyond-ASCII one too, and the
// whole server backed up, dropped and restored. Then the two across
// versions, each failing first with an error that says what to do, then
// doing it: 11.8's client refuses 10.5's server, which has no TLS
// (MariaDB's clients from 11.4 on require it), and a dump whose first
// line turns on the sandbox mode (the host's mariadb-dump, 10.11.19)
// stops 10.5.23's client, which predates that mode.
func TestMySQLClients(t *testing.T) {
	old, newer := startMariaDBWithPipe(t, "10.5"), startMariaDBWithPipe(t, "11.8")
	for _, v := range []string{"10.5", "11.8"} {
		m := map[string]*mariaServer{"10.5": old, "11.8": newer}[v]
		t.Run(v, func(t *testing.T) {
			if dump := m.clientVersion(t); !strings.Contains(dump, v+".") {
				t.Fatalf("the container's mariadb-dump is not %s's: %s", v, dump)
			}
			m.loadShop(t)
			m.sql(t, mariaIntl)

			// One database, as the backup user, restored beside it.
			m.mustPipeInside(t, m.IP, "backup", "user=backup", "password="+mariaBackupPassword)
			m.mustPipeInside(t, m.IP, "restore")
			m.sameDatabase(t, "shop", "restored")
			m.sql(t, "DROP DATABASE restored") // not twice the data in the server's backup
			m.mustPipeInside(t, m.IP, "backup", "database=intl")
			m.mustPipeInside(t, m.IP, "restore", "database=intl", "target=intl_copy")
			m.sameIntl(t, "intl", "intl_copy")

			// The whole server, dropped and restored over itself.
			user := "SELECT schema_name FROM information_schema.schemata WHERE schema_name NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys') ORDER BY 1"
			fingerprint := func() string {
				var b strings.Builder
				for _, db := range strings.Split(m.sql(t, user), "\n") {
					tables := strings.Fields(m.sql(t, fmt.Sprintf("SELECT table_name FROM information_schema.tables WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY 1", sqlString(db))))
					for _, table := range tables {
						b.WriteString(m.sql(t, fmt.Sprintf("CHECKSUM TABLE `%s`.`%s`", db, table)) + "\n")
					}
					b.WriteString(m.sql(t, strings.ReplaceAll("SELECT (SELECT COUNT(*) FROM information_schema.views WHERE table_schema = DB), (SELECT COUNT(*) FROM information_schema.triggers WHERE trigger_schema = DB), (SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DB)", "DB", sqlString(db))) + "\n")
				}
				return b.String()
			}
			want := fingerprint()
			m.mustPipeInside(t, m.IP, "server")
			m.sql(t, "DROP DATABASE shop; DROP DATABASE intl; DROP DATABASE intl_copy")
			m.mustPipeInside(t, m.IP, "server-restore")
			if got := fingerprint(); got != want {
				t.Errorf("the restored server differs:\n%s\n---\n%s", want, got)
			} else if !strings.Contains(got, "shop.orders\t") || !strings.Contains(got, "intl_copy.tæble_ß\t") {
				t.Errorf("the comparison misses databases:\n%s", got)
			}
		})
	}

	t.Run("11.8 client, 10.5 server", func(t *testing.T) {
		code, out := newer.pipeInside(t, old.IP, "backup", "database=intl")
		if code == 0 || !strings.Contains(out, "SSL is required, but the server does not support it") ||
			!strings.Contains(out, `set client_options = { "disable-ssl-verify-server-cert" = "" }`) {
			t.Fatalf("pipe with 11.8's client against 10.5's server without TLS: exit %d, want an error saying what to do\n%s", code, out)
		}
		t.Logf("without TLS:\n%s", out)
		opts := `options={ "disable-ssl-verify-server-cert" = "" }`
		newer.mustPipeInside(t, old.IP, "backup", "database=intl", opts)
		newer.mustPipeInside(t, old.IP, "restore", "database=intl", "target=intl_from_118", opts)
		old.sameIntl(t, "intl", "intl_from_118")
	})

	t.Run("newer dump, 10.5 client", func(t *testing.T) {
		// The host's pipe and mariadb-dump back intl up; 10.5's client
		// restores it.
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "intl.hcl"), []byte(mariaIntlFile))
		env := []string{"PIPE_VAR_db_host=" + old.Host, "PIPE_VAR_db_port=" + old.Port, "PIPE_VAR_root_password=" + mariaRootPassword, "PIPE_VAR_target=intl_from_host"}
		mustPipe(t, dir, env, "run", "intl.hcl", "--pipeline", "backup")
		if code, out := old.inside(t, nil, "mkdir", "/host"); code != 0 {
			t.Fatal(out)
		}
		// CopyDirToContainer puts the folder into the path's parent.
		if err := old.c.CopyDirToContainer(context.Background(), filepath.Join(dir, "intl"), "/host/intl", 0o644); err != nil {
			t.Fatal(err)
		}
		_, help := old.inside(t, nil, "mariadb", "--help")
		code, out := old.pipeInside(t, old.IP, "restore", "from=/host/intl/", "target=intl_from_host")
		if strings.Contains(help, "--sandbox") {
			// 10.5.25 or later (a mirror with bullseye's security
			// updates): the client knows the sandbox mode.
			t.Logf("%s knows the sandbox mode", old.clientVersion(t))
			if code != 0 {
				t.Fatalf("the restore failed: exit %d\n%s", code, out)
			}
			old.sameIntl(t, "intl", "intl_from_host")
			return
		}
		if code == 0 || !strings.Contains(out, `Unknown command '\-'`) || !strings.Contains(out, "restore with a mariadb client of those versions or later (client_command)") {
			t.Fatalf("10.5.23's client fed a sandboxed dump: exit %d, want an error saying what to do\n%s", code, out)
		}
		t.Logf("a sandboxed dump:\n%s", out)
		// As the error says: a newer client, the host's.
		mustPipe(t, dir, env, "run", "intl.hcl", "--pipeline", "restore")
		old.sameIntl(t, "intl", "intl_from_host")
	})
}
