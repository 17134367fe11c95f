package postgres

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Debian and Ubuntu install the PostgreSQL client programs under
// /usr/lib/postgresql/<major>/bin and put in PATH symlinks to pg_wrapper,
// a Perl script that picks a version and then executes the program: about
// 20 ms of CPU per start on an idle machine, more on a busy one, paid by
// every pg_dump, pg_dumpall, pg_restore and psql a run starts (ten for a
// server of eight databases, and on the critical path of each). pg_wrapper
// cannot see the host in the connection string pipe passes, so it may also
// pick the version of a local cluster, older than the server pipe talks
// to. pipe resolves the wrapper itself, to the newest installed version's
// program: what the wrapper runs when no local cluster applies, and a
// pg_dump that can dump every server up to its version. A PGCLUSTER in the
// environment (the wrapper's own way to choose) leaves the wrapper in
// charge.

// resolveTool returns the program pg_wrapper would run for program (a
// name in PATH or a path), found where PATH has it, or program itself when
// it is not the wrapper.
func resolveTool(program, found string) string {
	if os.Getenv("PGCLUSTER") != "" {
		return program
	}
	target, err := filepath.EvalSymlinks(found)
	if err != nil || filepath.Base(target) != "pg_wrapper" {
		return program
	}
	// pg_wrapper lives in <prefix>/share/postgresql-common; the programs
	// in <prefix>/lib/postgresql/<version>/bin.
	root := filepath.Join(filepath.Dir(target), "..", "..", "lib", "postgresql")
	if p := newestProgram(root, filepath.Base(found)); p != "" {
		return p
	}
	return program
}

// newestProgram is root/<version>/bin/name of the highest version that
// has it, or "".
func newestProgram(root, name string) string {
	entries, err := os.ReadDir(root)
	if err != nil {
		return ""
	}
	best, bestVersion := "", []int(nil)
	for _, e := range entries {
		v, ok := parseVersion(e.Name())
		if !ok {
			continue
		}
		p := filepath.Join(root, e.Name(), "bin", name)
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		if bestVersion == nil || slices.Compare(v, bestVersion) > 0 {
			best, bestVersion = filepath.Clean(p), v
		}
	}
	return best
}

// parseVersion reads a version directory's name: "16", "9.6".
func parseVersion(s string) ([]int, bool) {
	var v []int
	for part := range strings.SplitSeq(s, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, false
		}
		v = append(v, n)
	}
	return v, len(v) > 0 && len(v) <= 2
}
