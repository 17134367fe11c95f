package postgres

import (
	"os"
	"path/filepath"
	"testing"
)

// A Debian layout: PATH's programs are symlinks to pg_wrapper, the real
// ones under lib/postgresql/<version>/bin.
func TestResolveTool(t *testing.T) {
	usr := filepath.Join(t.TempDir(), "usr")
	file := func(p string, mode os.FileMode) {
		t.Helper()
		p = filepath.Join(usr, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	file("share/postgresql-common/pg_wrapper", 0o755)
	for _, v := range []string{"9.6", "13", "16"} {
		file("lib/postgresql/"+v+"/bin/pg_dump", 0o755)
	}
	file("lib/postgresql/13/bin/pg_dumpall", 0o755)
	file("lib/postgresql/17/bin/pg_dump", 0o644) // not executable
	file("lib/postgresql/common/bin/pg_dump", 0o755)
	file("bin/mytool", 0o755)
	if err := os.MkdirAll(filepath.Join(usr, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"pg_dump", "pg_dumpall", "pg_restore"} {
		if err := os.Symlink("../share/postgresql-common/pg_wrapper", filepath.Join(usr, "bin", name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", filepath.Join(usr, "bin"))
	t.Setenv("PGCLUSTER", "")
	lib := func(p string) string { return filepath.Join(usr, "lib/postgresql", p) }
	for _, c := range []struct{ program, want string }{
		{"pg_dump", lib("16/bin/pg_dump")},
		{filepath.Join(usr, "bin/pg_dump"), lib("16/bin/pg_dump")},
		{"pg_dumpall", lib("13/bin/pg_dumpall")}, // the newest that has it
		{"pg_restore", "pg_restore"},             // no version has it: the wrapper says why
		{"mytool", "mytool"},                     // not the wrapper
	} {
		if got, d := lookTool("pg_dump", c.program); d != nil || got != c.want {
			t.Errorf("lookTool(%q) = %q, %v; want %q", c.program, got, d, c.want)
		}
	}
	if got, d := lookTool("pg_dump", "missing"); d == nil {
		t.Errorf("lookTool(missing) = %q, want an error", got)
	}
	t.Setenv("PGCLUSTER", "13/main")
	if got, _ := lookTool("pg_dump", "pg_dump"); got != "pg_dump" {
		t.Errorf("with PGCLUSTER set, lookTool(pg_dump) = %q, want the wrapper", got)
	}
}
