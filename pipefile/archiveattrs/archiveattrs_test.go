package archiveattrs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReadLiteral(t *testing.T) {
	dir := t.TempDir()
	write := func(src string) string {
		p := filepath.Join(dir, "pg.hcl")
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The defaults are a full load's.
	p := write(`variable "secret" { sensitive = true }
archive "pg" {
  store "s3" {
    bucket            = "b"
    secret_access_key = var.secret
  }
}`)
	s, err := ReadLiteral(p, "")
	if err != nil {
		t.Fatal(err)
	}
	want := Settings{Archive: "pg", Background: "auto", Async: false, Spool: "pg_wal/pipe-spool/push", Timeout: 60 * time.Second,
		Prefetch: 8, FetchSpool: "pg_wal/pipe-spool/fetch", SegmentSize: 16 << 20}
	if *s != want {
		t.Errorf("defaults: %+v, want %+v", *s, want)
	}

	// Literal settings, of the archive named among several; what the
	// file holds beyond them (a store, a stage pipe-wal does not know) is
	// not read.
	p = write(`archive "a" {
  store "fs" { path = "/a/" }
}
archive "b" {
  store "nope" { whatever = upper("x") }
  compress { codec = "zstd" }
  background = "always"
  segment_size = "64MiB"
  system_identifier = "7301234567890123456"
  push {
    async   = true
    spool   = "/var/spool/pipe"
    timeout = "90s"
    workers = 8
  }
  fetch {
    prefetch = 16
    spool    = "/var/spool/fetch"
  }
}`)
	s, err = ReadLiteral(p, "b")
	if err != nil {
		t.Fatal(err)
	}
	want = Settings{Archive: "b", Background: "always", Async: true, Spool: "/var/spool/pipe", Timeout: 90 * time.Second,
		Prefetch: 16, FetchSpool: "/var/spool/fetch", SegmentSize: 64 << 20, SystemID: "7301234567890123456"}
	if *s != want {
		t.Errorf("archive b: %+v, want %+v", *s, want)
	}
	// Two archives and none named, or a name not there: pipe decides.
	for _, name := range []string{"", "c"} {
		if _, err := ReadLiteral(p, name); !errors.Is(err, ErrNotLiteral) {
			t.Errorf("archive %q: %v, want ErrNotLiteral", name, err)
		}
	}

	// A setting that uses a variable or a function, or has the wrong
	// type: not read, pipe loads the file.
	for _, push := range []string{
		`spool = var.spool`,
		`spool = lower("X")`,
		`async = "maybe"`,
		`timeout = "soon"`,
		`nope = 1`,
	} {
		p = write(`variable "spool" { default = "/s" }
archive "pg" {
  store "fs" { path = "/a/" }
  push {
    ` + push + `
  }
}`)
		if _, err := ReadLiteral(p, ""); err == nil {
			t.Errorf("push { %s }: read, want an error", push)
		}
	}
	// The same for fetch's settings, and a block given twice.
	for _, fetch := range []string{
		`fetch { spool = var.spool }`,
		`fetch { prefetch = "many" }`,
		`fetch { prefetch = 2 }
  fetch { prefetch = 3 }`,
	} {
		p = write(`variable "spool" { default = "/s" }
archive "pg" {
  store "fs" { path = "/a/" }
  ` + fetch + `
}`)
		if _, err := ReadLiteral(p, ""); err == nil {
			t.Errorf("%s: read, want an error", fetch)
		}
	}
	if _, err := ReadLiteral(filepath.Join(dir, "missing.hcl"), ""); err == nil {
		t.Error("a missing file: read")
	}
}
