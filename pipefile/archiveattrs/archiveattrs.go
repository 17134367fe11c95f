// Package archiveattrs is an archive block's attributes (its own, its
// push block's and its fetch block's), which package pipefile loads, and
// ReadLiteral, which reads their values from a pipeline file's text when
// they are literals, without the stores' schemas, the plugins, the
// variables or the rest of pipefile: pipe-wal, which PostgreSQL starts
// once per segment, reads an archive's settings so.
package archiveattrs

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Archive are an archive block's own attributes.
var Archive = []sdk.Attribute{
	{Name: "system_identifier", Type: sdk.String, Public: true, Description: "The cluster's system identifier (pg_controldata's \"Database system identifier\"). Default: read from global/pg_control of the data directory PostgreSQL runs the command in."},
	{Name: "segment_size", Type: sdk.Size, Default: int64(16 << 20), Description: "The WAL segment size of the cluster (initdb --wal-segsize), for naming the segments that follow one and finding gaps."},
	{Name: "background", Type: sdk.String, Default: "auto", Description: "Who pushes ahead (push { async }) and prefetches (fetch { prefetch }): \"auto\", a background process where PID 1 is a known init (systemd, tini, …), else archive_command and restore_command themselves; \"always\", a background process whatever PID 1 is (say so only where it reaps orphans and is not PostgreSQL); \"never\", the commands themselves."},
}

// Push are an archive's push block's attributes.
var Push = []sdk.Attribute{
	{Name: "async", Type: sdk.Bool, Default: false, Description: "Push ahead: the files PostgreSQL marked ready (pg_wal/archive_status/*.ready) are pushed, workers at once, before their archive_command asks: by a background pusher or by archive_command itself (the archive's background attribute)."},
	{Name: "workers", Type: sdk.Number, Default: int64(4), Description: "Files pushed at once (async)."},
	{Name: "spool", Type: sdk.String, Default: "pg_wal/pipe-spool/push", Description: "Where the notes of files pushed ahead, the lock and the pusher's log are, relative to the data directory."},
	{Name: "timeout", Type: sdk.Duration, Default: 60 * time.Second, Description: "How long archive_command waits for its file to be pushed ahead (or for another push that holds the spool) before it fails; PostgreSQL then retries."},
	{Name: "max_backlog", Type: sdk.Number, Default: int64(1024), Description: "Files waiting in pg_wal/archive_status beyond which pipe logs an error and pipe_wal_backlog_exceeded is 1. pipe never drops WAL to keep up: a dropped segment breaks recovery."},
}

// Fetch are an archive's fetch block's attributes.
var Fetch = []sdk.Attribute{
	{Name: "prefetch", Type: sdk.Number, Default: int64(8), Description: "Segments after the newest one recovery asked for that are brought into the spool, oldest first and at most 8 at once (0: none): by a background prefetcher or by restore_command itself (the archive's background attribute)."},
	{Name: "spool", Type: sdk.String, Default: "pg_wal/pipe-spool/fetch", Description: "Where prefetched segments wait, relative to the data directory (keep it on pg_wal's file system: they are renamed into place)."},
	{Name: "retries", Type: sdk.Number, Default: int64(5), Description: "How often a fetch that failed (not a segment that is not archived) is tried again before pipe stops recovery."},
}

// Settings are what archive_command needs of an archive to answer
// for a file a background pusher archived already (where the pusher's
// notes are and how long to wait for one), and what restore_command
// needs to take a prefetched segment from the spool (where it is, how
// many are prefetched, the cluster's segment size and, when the archive
// says it, system identifier). pipe-wal reads them with
// ReadLiteral, without the stores' schemas, the plugins or the
// variables that loading the whole file takes.
type Settings struct {
	Archive    string
	Background string
	Async      bool
	Spool      string
	Timeout    time.Duration
	// Fetch's settings.
	Prefetch    int
	FetchSpool  string
	SegmentSize int64
	SystemID    string // "" to read pg_control
}

// ErrNotLiteral is ReadLiteral's error for a file whose settings
// need more than the file's text to be known: a variable, a function, an
// archive that must be chosen. The caller loads the file in full.
var ErrNotLiteral = errors.New("the archive's settings are not literal")

// ReadLiteral reads the push and fetch settings of the archive called
// name (the only one when name is "") from the pipeline file at path,
// with the defaults and types of a full load. Every setting read must be
// a literal; whatever else the file holds is not looked at.
func ReadLiteral(path, name string) (*Settings, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if d := hclvalue.CheckLimits(path, src); d.HasErrors() {
		return nil, d
	}
	hf, diags := hclsyntax.ParseConfig(src, path, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, diags
	}
	content, _, diags := hf.Body.PartialContent(&hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "archive", LabelNames: []string{"name"}}}})
	if diags.HasErrors() {
		return nil, diags
	}
	var found []*hcl.Block
	for _, b := range content.Blocks {
		if name == "" || b.Labels[0] == name {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%s: %d archives named %q: %w", path, len(found), name, ErrNotLiteral)
	}
	b := found[0]
	notLiteral := fmt.Errorf("%s: archive %q: %w", path, b.Labels[0], ErrNotLiteral)
	archive, _, diags := b.Body.PartialContent(&hcl.BodySchema{
		Attributes: hclvalue.Schema(Archive, ""),
		Blocks:     []hcl.BlockHeaderSchema{{Type: "push"}, {Type: "fetch"}},
	})
	if diags.HasErrors() {
		return nil, notLiteral
	}
	attrs, ok := literals(archive.Attributes, Archive)
	if !ok {
		return nil, notLiteral
	}
	blocks := map[string]map[string]any{"push": defaults(Push), "fetch": defaults(Fetch)}
	seen := map[string]bool{}
	for _, bb := range archive.Blocks {
		schema := map[string][]sdk.Attribute{"push": Push, "fetch": Fetch}[bb.Type]
		c, diags := bb.Body.Content(&hcl.BodySchema{Attributes: hclvalue.Schema(schema, "")})
		if seen[bb.Type] || diags.HasErrors() {
			return nil, notLiteral
		}
		seen[bb.Type] = true
		if blocks[bb.Type], ok = literals(c.Attributes, schema); !ok {
			return nil, notLiteral
		}
	}
	push, fetch := blocks["push"], blocks["fetch"]
	s := &Settings{Archive: b.Labels[0]}
	s.Background, _ = attrs["background"].(string)
	s.SystemID, _ = attrs["system_identifier"].(string)
	s.SegmentSize, _ = attrs["segment_size"].(int64)
	s.Async, _ = push["async"].(bool)
	s.Spool, _ = push["spool"].(string)
	s.Timeout, _ = push["timeout"].(time.Duration)
	s.FetchSpool, _ = fetch["spool"].(string)
	if n, ok := fetch["prefetch"].(int64); ok {
		s.Prefetch = int(n)
	}
	return s, nil
}

// defaults are the values of schema's attributes that have a default.
func defaults(schema []sdk.Attribute) map[string]any {
	out := map[string]any{}
	for _, a := range schema {
		if a.Default != nil {
			out[a.Name] = a.Default
		}
	}
	return out
}

// literals are the values of attrs, declared in schema, with the defaults
// of those not given; false when one is not a literal (a variable, a
// function) or not a valid value of its type.
func literals(attrs hcl.Attributes, schema []sdk.Attribute) (map[string]any, bool) {
	out := defaults(schema)
	for _, a := range schema {
		attr, ok := attrs[a.Name]
		if !ok {
			continue
		}
		val, diags := attr.Expr.Value(nil)
		if diags.HasErrors() || !val.IsWhollyKnown() {
			return nil, false
		}
		if val.IsNull() {
			continue // the default, as a full load takes it
		}
		v, diags := hclvalue.Decode(a, attr, val)
		if diags.HasErrors() || hclvalue.Check(a, attr, v) != nil {
			return nil, false
		}
		out[a.Name] = v
	}
	return out, true
}
