package plan_test

import (
	"strings"
	"testing"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plan"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/wal"
)

// An archive's store is counted for objects of at most one segment,
// compressed: the larger of what push (sink) and fetch (source) hold with
// every segment in flight; a store that cannot say so is counted by
// Memory.
func TestArchiveStoreMemory(t *testing.T) {
	reg := newRegistry(t)
	const src = `archive "main" {
  store "s3" {
    bucket      = "b"
    key         = "wal/"
    part_size   = "64MiB"
    concurrency = 4
  }
  compress {}
  push {
    async   = true
    workers = 4
  }
  fetch { prefetch = 8 }
}
`
	f, d := pipefile.LoadSource("a.hcl", []byte(src), pipefile.Options{Now: corpusNow, Dir: ".", Schemas: reg, Running: true})
	if d.HasErrors() {
		t.Fatal(d)
	}
	resolve := func(o plan.Options) *plan.Archive {
		t.Helper()
		o.Host = corpusHost
		p, d := plan.New(f, o)
		if d.HasErrors() {
			t.Fatal(d)
		}
		a, err := p.Archive("")
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	maxObject := compress.MaxStored(16<<20, wal.FrameSize)
	each := maxObject / 8 // the objects in transfer are one segment's object together (wal.Archive.TransferMemory)
	asked := map[string]bool{}
	a := resolve(plan.Options{Memory: reg.Memory, SmallObjectMemory: func(kind, typ string, cfg sdk.Config, streams int, max int64) int64 {
		asked[kind] = true
		if typ != "s3" || streams != 8 || max != each {
			t.Errorf("asked %s %s for %d objects of at most %d bytes; want 8 of at most %d", kind, typ, streams, max, each)
		}
		return reg.SmallObjectMemory(kind, typ, cfg, streams, max)
	}})
	if !asked["sink"] || !asked["source"] || a.MaxObject() != maxObject {
		t.Errorf("asked %v; MaxObject %d", asked, a.MaxObject())
	}
	cfg := sdk.NewConfig(f.Archives[0].Store.Values)
	const conn = 2 * 256 << 10 // the s3 store's read and write buffers
	if want := 8*(each+conn) + 2<<20; a.EndpointMemory != want {
		t.Errorf("store memory %d, want 8 × (an eighth of one segment's object + its connection) + 2 MiB = %d", a.EndpointMemory, want)
	}
	anySize := reg.Memory("sink", "s3", cfg, 8)
	if a.EndpointMemory*10 > anySize {
		t.Errorf("store memory %d, not far below the %d objects of any size take", a.EndpointMemory, anySize)
	}
	// Files stream: 8 in flight hold a block each, as many codec states
	// as the host has CPUs, and the stored bytes not yet sent; nothing
	// the size of a segment.
	files := 8*(256<<10) + int64(corpusHost.CPUs)*a.StateMemory + wal.DefaultStoredMemory
	if b := a.Budget(); b != files+a.EndpointMemory+plan.WALRuntimeMemory {
		t.Errorf("budget %d does not add up: want %d", b, files+a.EndpointMemory+plan.WALRuntimeMemory)
	}
	if a.StateMemory > 8<<20 {
		t.Errorf("zstd level 3's streaming state is counted as %d bytes: more than its 2 MiB window and tables", a.StateMemory)
	}
	// Without the small-object estimate, Memory counts it.
	if old := resolve(plan.Options{Memory: reg.Memory}); old.EndpointMemory != anySize {
		t.Errorf("with Memory only: %d, want %d", old.EndpointMemory, anySize)
	}
}

// A binlog block is taken as written, with its defaults; a relative
// path, a lag or part out of range and a codec that is not zstd are
// each refused where they are written.
func TestArchiveBinlog(t *testing.T) {
	reg := newRegistry(t)
	load := func(binlog, compress string) (*plan.Archive, string) {
		t.Helper()
		src := `archive "bl" {
  store "fs" { path = "/backups/binlog/" }
  ` + compress + `
  binlog {
    ` + binlog + `
  }
}
`
		f, d := pipefile.LoadSource("a.hcl", []byte(src), pipefile.Options{Now: corpusNow, Dir: ".", Schemas: reg, Running: true})
		if d.HasErrors() {
			return nil, d.Error()
		}
		p, d := plan.New(f, plan.Options{Host: corpusHost, Memory: reg.Memory})
		if d.HasErrors() {
			return nil, d.Error()
		}
		a, err := p.Archive("")
		if err != nil {
			t.Fatal(err)
		}
		return a, ""
	}
	a, errs := load(`path = "/var/lib/mysql/mysql-bin"`, "compress {}")
	if errs != "" || a.Binlog == nil || a.Binlog.Base != "/var/lib/mysql/mysql-bin" || a.Binlog.MaxLag.Seconds() != 1 || a.Binlog.PartSize != 16<<20 {
		t.Fatalf("defaults: %+v %s", a.Binlog, errs)
	}
	// The budget holds a segment three times over (its bytes, compressed,
	// sealed), and grows with part_size.
	small := a.Budget()
	if small < 3*16<<20 {
		t.Errorf("budget %d holds less than three 16 MiB segments", small)
	}
	big, _ := load(`path = "/b"
    part_size = "64MiB"`, "compress {}")
	if big == nil || big.Budget()-small < 3*48<<20 {
		t.Errorf("part_size 64MiB: budget %v, 16MiB's %d", big, small)
	}
	for _, c := range []struct{ binlog, compress, want string }{
		{`path = "mysql-bin"`, "", "a.hcl:5,12-23: Invalid path"},
		{`path = "/b"
    max_lag = "1ms"`, "", "Invalid max_lag"},
		{`path = "/b"
    part_size = "1KiB"`, "", "Invalid part_size"},
		{`path = "/b"`, `compress { codec = "gzip" }`, "Not zstd"},
		{``, "", `"path" is required`},
	} {
		if _, errs := load(c.binlog, c.compress); !strings.Contains(errs, c.want) {
			t.Errorf("%q, %q: %q, want %q", c.binlog, c.compress, errs, c.want)
		}
	}
}
