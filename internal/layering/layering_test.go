package layering

import (
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const mod = "github.com/pipebackup/pipe/"

// deps returns the packages of this module that pkg imports, directly or
// not (tests excluded).
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", mod+pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	var own []string
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, mod) && p != mod+pkg {
			own = append(own, strings.TrimPrefix(p, mod))
		}
	}
	return own
}

func packages(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", mod+pattern).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	var pkgs []string
	for _, p := range strings.Fields(string(out)) {
		pkgs = append(pkgs, strings.TrimPrefix(p, mod))
	}
	return pkgs
}

func forbid(t *testing.T, pkg string, prefixes ...string) {
	t.Helper()
	for _, d := range deps(t, pkg) {
		for _, f := range prefixes {
			if d == f || strings.HasPrefix(d, f+"/") {
				t.Errorf("%s imports %s", pkg, d)
			}
		}
	}
}

func TestImportRules(t *testing.T) {
	// The engine knows stages and endpoints through interfaces only.
	forbid(t, "engine", "cmd", "stages", "plugins/storage", "plugins/command", "plugins/all", "plugins/host", "pipefile", "plan", "runner", "tune")
	// pipe bench's tuner sits between the CLI and the runner: nothing
	// below it imports it, and it knows no CLI.
	for _, p := range []string{"runner", "plan", "pipefile", "plugins/host"} {
		forbid(t, p, "tune")
	}
	// A plugin binary links the SDK and nothing else of pipe; the
	// interfaces themselves depend on nothing at all.
	forbid(t, "plugins/sdk", "engine", "stages", "pipefile", "plan", "runner", "cmd", "plugins/all", "plugins/host", "plugins/storage", "plugins/command", "plugins/internal", "plugins/sdk/plugin")
	forbid(t, "plugins/sdk/plugin", "engine", "stages", "pipefile", "plan", "runner", "cmd", "plugins/all", "plugins/host", "plugins/storage", "plugins/command")
	out, err := exec.Command("go", "list", "-deps", mod+"plugins/sdk").Output()
	if err != nil {
		t.Fatalf("go list -deps plugins/sdk: %v", err)
	}
	if strings.Contains(string(out), "google.golang.org/grpc") {
		t.Error("plugins/sdk imports gRPC; only plugins/sdk/plugin should")
	}
	// The whole-file moves are linked into every plugin binary through
	// the plugin server: they import the SDK and nothing else of pipe.
	for _, d := range deps(t, "internal/direct") {
		if d != "plugins/sdk" {
			t.Errorf("internal/direct imports %s; it imports only plugins/sdk", d)
		}
	}
	for _, st := range packages(t, "stages/...") {
		forbid(t, st, "plugins/storage", "plugins/command", "plugins/all", "plugins/host", "cmd", "runner", "plan", "pipefile")
	}
	// The table of stage kinds is facts only, so that the file loader
	// reads it without the engine; what each kind does is registered in
	// plan, which may import the engine and the stages.
	for _, d := range deps(t, "stages/stagekind") {
		if d != "plugins/sdk" {
			t.Errorf("stages/stagekind imports %s; it imports only plugins/sdk", d)
		}
	}
	forbid(t, "pipefile", "engine", "stages/compress", "stages/encrypt", "stages/checksum", "plan", "runner")
	// The WAL archive knows stores through the SDK's interfaces only: the
	// runner opens them (runner.OpenArchive) and the commands call it.
	forbid(t, "wal", "runner", "plan", "pipefile", "cmd", "plugins/storage", "plugins/command", "plugins/database", "plugins/all", "plugins/host", "plugins/sdk/plugin")
	// pipe-wal starts once per WAL segment, and its start is most of its
	// cost: it links the spools, the names and the archive's settings,
	// and nothing else of pipe (no store, codec or hash: each package's
	// initialisers and pages add to every start), and no cloud SDK.
	pipeWal := map[string]bool{"wal/quickpush": true, "wal/spool": true, "wal/walname": true, "pipefile/archiveattrs": true, "pipefile/hclvalue": true, "plugins/sdk": true}
	for _, d := range deps(t, "cmd/pipe-wal") {
		if !pipeWal[d] {
			t.Errorf("cmd/pipe-wal links %s; it links only %v", d, slices.Sorted(maps.Keys(pipeWal)))
		}
	}
	out, err = exec.Command("go", "list", "-deps", mod+"cmd/pipe-wal").Output()
	if err != nil {
		t.Fatalf("go list -deps cmd/pipe-wal: %v", err)
	}
	for _, lib := range []string{"github.com/aws/", "cloud.google.com/", "github.com/Azure/", "google.golang.org/grpc", "github.com/klauspost/", "github.com/zeebo/xxh3", "filippo.io/age"} {
		if strings.Contains(string(out), lib) {
			t.Errorf("cmd/pipe-wal links %s…; it must start without any store's SDK, codec or hash", lib)
		}
	}
	// Built-in plugins import the SDK only, the storage plugins the
	// helpers they share (the ranged reader, the bulk transport, the
	// object lock settings), which import nothing of pipe at all but the
	// buffer allocator (and the lock settings the SDK), and the
	// command and database plugins the program runner, which imports the
	// SDK only, and the database plugins the database chooser; the fs
	// storage and PostgreSQL plugins the tar extractor. The buffer
	// allocator, the OS pipes, pipe's version, the /proc memory reader,
	// the database chooser and the tar extractor import nothing of pipe.
	const shared, runner, buffers, pipes, dbselect, untar = "plugins/storage/internal/", "plugins/internal/command", "plugins/sdk/hugepage", "plugins/sdk/ospipe", "plugins/internal/dbselect", "plugins/internal/untar"
	const binlogfile = "internal/binlogfile"
	for _, leaf := range []string{buffers, pipes, dbselect, untar, binlogfile, "internal/version", "internal/procmem"} {
		if d := deps(t, leaf); len(d) > 0 {
			t.Errorf("%s imports %v; it imports nothing of pipe", leaf, d)
		}
	}
	var plugins []string
	for _, pattern := range []string{"plugins/storage/...", "plugins/command/...", "plugins/database/...", runner} {
		plugins = append(plugins, packages(t, pattern)...)
	}
	for _, p := range plugins {
		for _, d := range deps(t, p) {
			switch {
			case d == buffers:
			case d == dbselect && strings.HasPrefix(p, "plugins/database/"):
			case d == binlogfile && p == "plugins/database/mysql":
			case d == untar && (p == "plugins/storage/fs" || p == "plugins/database/postgres" || p == "plugins/database/mysql"):
			case d == pipes && !strings.HasPrefix(p, shared):
			case p == shared+"objlock" && d == "plugins/sdk": // it declares the lock attributes
			case strings.HasPrefix(p, shared):
				t.Errorf("%s imports %s; the storage plugins' shared helpers import nothing of pipe", p, d)
			case p == runner && d != "plugins/sdk":
				t.Errorf("%s imports %s; the program runner imports only plugins/sdk (and %s)", p, d, pipes)
			case d != "plugins/sdk" && !strings.HasPrefix(d, shared) && d != runner:
				t.Errorf("plugin %s imports %s; plugins may import only plugins/sdk (and the storage plugins %s…, the command and database plugins %s)", p, d, shared, runner)
			}
		}
	}
	// Nothing but the CLI wires the built-ins in.
	for _, p := range []string{"engine", "runner", "plan", "pipefile", "plugins/host", "plugins/conformance", "tune"} {
		forbid(t, p, "plugins/all")
	}
	// Signatures are stdlib crypto and formats: manifest, wal, plan and
	// runner use them, and they know none of those.
	if d := deps(t, "signing"); len(d) > 0 {
		t.Errorf("signing imports %v; it imports nothing of pipe", d)
	}
	// The manifest and the catalog read what stores hold: the SDK's types,
	// nothing that runs.
	for _, p := range []string{"manifest", "catalog"} {
		forbid(t, p, "engine", "stages", "plugins/storage", "plugins/command", "plugins/database", "plugins/host", "plugins/all", "plugins/internal", "runner", "plan", "pipefile", "cmd")
	}
	// The host, the loader and the tuner know no concrete plugin.
	for _, p := range []string{"plugins/host", "runner", "pipefile", "plan", "tune"} {
		forbid(t, p, "plugins/storage", "plugins/command", "plugins/database")
	}
}
