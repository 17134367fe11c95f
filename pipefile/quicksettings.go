package pipefile

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/pipebackup/pipe/plugins/sdk"
)

// QuickSettings are what archive_command needs of an archive to answer
// for a file a background pusher archived already (where the pusher's
// notes are and how long to wait for one), and what restore_command
// needs to take a prefetched segment from the spool (where it is, how
// many are prefetched, the cluster's segment size and, when the archive
// says it, system identifier). pipe-wal reads them with
// ReadQuickSettings, without the stores' schemas, the plugins or the
// variables that loading the whole file takes.
type QuickSettings struct {
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

// ErrNotLiteral is ReadQuickSettings' error for a file whose settings
// need more than the file's text to be known: a variable, a function, an
// archive that must be chosen. The caller loads the file in full.
var ErrNotLiteral = errors.New("the archive's settings are not literal")

// ReadQuickSettings reads the push and fetch settings of the archive called name
// (the only one when name is "") from the pipeline file at path, with the
// defaults and types of a full load. Every setting read must be a literal;
// whatever else the file holds is not looked at.
func ReadQuickSettings(path, name string) (*QuickSettings, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if d := checkLimits(path, src); d.HasErrors() {
		return nil, d
	}
	hf, diags := hclparse.NewParser().ParseHCL(src, path)
	if diags.HasErrors() {
		return nil, diags
	}
	content, _, diags := hf.Body.PartialContent(rootSchema)
	if diags.HasErrors() {
		return nil, diags
	}
	var found []*hcl.Block
	for _, b := range content.Blocks {
		if b.Type == "archive" && (name == "" || b.Labels[0] == name) {
			found = append(found, b)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%s: %d archives named %q: %w", path, len(found), name, ErrNotLiteral)
	}
	b := found[0]
	f := &File{Path: path, secrets: map[string]bool{}, unset: map[string]*Variable{}}
	archive, _, diags := b.Body.PartialContent(&hcl.BodySchema{
		Attributes: attributeSchema(archiveAttrs, ""),
		Blocks:     []hcl.BlockHeaderSchema{{Type: "push"}, {Type: "fetch"}},
	})
	attrs, d := f.decodeAttributes("archive", b.DefRange, archive.Attributes, archiveAttrs, "", nil, src)
	diags = append(diags, d...)
	blocks := map[string]*Block{"push": defaults(archivePushAttrs, "push", b.DefRange), "fetch": defaults(archiveFetchAttrs, "fetch", b.DefRange)}
	seen := map[string]bool{}
	for _, bb := range archive.Blocks {
		if seen[bb.Type] {
			return nil, fmt.Errorf("%s: archive %q: %w", path, b.Labels[0], ErrNotLiteral)
		}
		seen[bb.Type] = true
		blocks[bb.Type], d = f.decodeBlock(bb, bb.Type, map[string][]sdk.Attribute{"push": archivePushAttrs, "fetch": archiveFetchAttrs}[bb.Type], "", nil, src)
		diags = append(diags, d...)
	}
	push, fetch := blocks["push"], blocks["fetch"]
	if diags.HasErrors() || len(attrs.Unknown) > 0 || len(push.Unknown) > 0 || len(fetch.Unknown) > 0 {
		return nil, fmt.Errorf("%s: archive %q: %w", path, b.Labels[0], ErrNotLiteral)
	}
	s := &QuickSettings{Archive: b.Labels[0], Background: attrs.String("background"), Spool: push.String("spool"),
		FetchSpool: fetch.String("spool"), SystemID: attrs.String("system_identifier")}
	s.Async, _ = push.Values["async"].(bool)
	s.Timeout, _ = push.Values["timeout"].(time.Duration)
	s.SegmentSize, _ = attrs.Int("segment_size")
	if n, ok := fetch.Int("prefetch"); ok {
		s.Prefetch = int(n)
	}
	return s, nil
}
