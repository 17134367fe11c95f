package pipefile

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/pipefile/archiveattrs"
	"github.com/pipebackup/pipe/pipefile/hclvalue"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// Archive is an archive block: one description of a PostgreSQL WAL archive
// that pipe wal push (archive_command) and pipe wal fetch
// (restore_command) both use, so they can never disagree: the store, the
// compression and the encryption (and, for fetch, the decryption).
type Archive struct {
	Name  string
	Range hcl.Range
	// Attrs holds the archive's own attributes (system_identifier,
	// segment_size).
	Attrs *Block
	// Store is where the segments go: a storage sink whose path is a
	// folder.
	Store *Endpoint
	// Stages are its compress, encrypt and decrypt blocks, as written.
	Stages []*Block
	// Push and Fetch are the push and fetch blocks' settings (nil: not
	// in the file, the defaults).
	Push, Fetch *Block
	// Binlog is its binlog block: the archive holds a MariaDB server's
	// binlog (pipe binlog archive), nil for a WAL archive.
	Binlog *Block
	// Sign is its sign block (push signs each object's name), Trust its
	// trust block (fetch, list and verify accept only what its keys
	// signed); nil without, or when the load left them unread.
	Sign, Trust *Block
}

// BinlogAttrs are the binlog block's: where the server's binlog is, and
// how closely the archive follows it.
var BinlogAttrs = []sdk.Attribute{
	{Name: "path", Type: sdk.String, Required: true, Description: "The server's log_bin_basename (SELECT @@log_bin_basename), e.g. \"/var/lib/mysql/mysql-bin\": its files are PATH.000001, …, listed in PATH.index. pipe binlog archive reads them there, so it runs on the server's machine."},
	{Name: "max_lag", Type: sdk.Duration, Default: time.Second, Description: "How long a byte the server wrote may wait before it is stored: the archive trails the server by about this much (a segment an interval)."},
	{Name: "part_size", Type: sdk.Size, Default: int64(16 << 20), Description: "The most bytes one segment holds: a busy server's binlog is stored in segments of this size, each held in memory once while it is sealed."},
}

func (f *File) loadArchive(b *hcl.Block, ectx *hcl.EvalContext, o *Options, src []byte) (*Archive, hcl.Diagnostics) {
	a := &Archive{Name: b.Labels[0], Range: b.DefRange}
	schema := &hcl.BodySchema{
		Attributes: hclvalue.Schema(archiveattrs.Archive, ""),
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "store", LabelNames: []string{"type"}},
			{Type: stagekind.Compress.Name}, {Type: stagekind.Encrypt.Name}, {Type: stagekind.Decrypt.Name},
			{Type: "push"}, {Type: "fetch"}, {Type: "binlog"}, signingBlocks[0], signingBlocks[1],
		},
	}
	content, diags := b.Body.Content(schema)
	attrs, d := f.decodeAttributes("archive", b.DefRange, content.Attributes, archiveattrs.Archive, "", ectx, src)
	diags = append(diags, d...)
	a.Attrs = attrs
	seen := map[string]hcl.Range{}
	for _, blk := range content.Blocks {
		if prev, dup := seen[blk.Type]; dup {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Duplicate " + blk.Type + " block",
				Detail: fmt.Sprintf("Archive %q already has a %s block at %s.", a.Name, blk.Type, pos(prev)), Subject: blk.DefRange.Ptr()})
			continue
		}
		seen[blk.Type] = blk.DefRange
		switch blk.Type {
		case "store":
			sink := *blk
			sink.Type = "sink"
			ep, d := f.loadEndpoint(&sink, ectx, o, src)
			diags = append(diags, d...)
			if ep == nil {
				continue
			}
			ep.Range = blk.DefRange
			switch {
			case !ep.Schema.Storage:
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Not a store",
					Detail: fmt.Sprintf("%q keeps nothing pipe can read back; a WAL archive needs a store: fs, s3, gcs or azure.", ep.Type), Subject: blk.LabelRanges[0].Ptr()})
			case ep.Key != nil && (ep.Key.Kind != KeyFolder || ep.Key.UsesRunID()):
				diags = append(diags, hclvalue.Diag(ep.attrs[ep.Key.Attr], "The archive is a folder",
					fmt.Sprintf("%s names where the archive's folder is: one folder, without ${run.id} or ${stream.*}, ending in \"/\" (segments go under it, by system identifier and timeline).", ep.Key.Attr)))
			case ep.Retention.Set():
				diags = append(diags, hclvalue.Diag(ep.attrs["keep_last"], "No retention in the archive",
					"WAL goes with the base backups that need it: keep_last or keep_within on the sink of the base backup pipeline removes, after each run and with pipe backups prune, the WAL archived before the oldest base backup it keeps."))
			}
			a.Store = ep
		case "binlog":
			bl, d := f.decodeBlock(blk, blk.Type, BinlogAttrs, "", ectx, src)
			diags = append(diags, d...)
			a.Binlog = bl
		case "push", "fetch":
			attrsOf := map[string][]sdk.Attribute{"push": archiveattrs.Push, "fetch": archiveattrs.Fetch}[blk.Type]
			bl, d := f.decodeBlock(blk, blk.Type, attrsOf, "", ectx, src)
			diags = append(diags, d...)
			if blk.Type == "push" {
				a.Push = bl
			} else {
				a.Fetch = bl
			}
		case "sign", "trust":
			if (blk.Type == "sign" && o.SkipSign) || (blk.Type == "trust" && o.SkipTrust) {
				continue // fetch never reads the signing key; push checks no signature
			}
			dst := &a.Sign
			if blk.Type == "trust" {
				dst = &a.Trust
			}
			diags = append(diags, f.loadSigning(blk, fmt.Sprintf("Archive %q", a.Name), dst, ectx, src)...)
		case stagekind.Decrypt.Name:
			if o.SkipDecrypt {
				continue // push never reads the private key
			}
			fallthrough
		default:
			k := stagekind.Lookup(blk.Type)
			st, d := f.decodeBlock(blk, blk.Type, k.Attributes, "", ectx, src)
			diags = append(diags, d...)
			a.Stages = append(a.Stages, st)
		}
	}
	if a.Store == nil && !diags.HasErrors() {
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing store",
			Detail: fmt.Sprintf(`Archive %q has no store block: add one, e.g. store "s3" { bucket = "backups", key = "wal/" }.`, a.Name), Subject: b.DefRange.Ptr()})
	}
	if a.Push == nil {
		a.Push = defaults(archiveattrs.Push, "push", b.DefRange)
	}
	if a.Fetch == nil {
		a.Fetch = defaults(archiveattrs.Fetch, "fetch", b.DefRange)
	}
	return a, diags
}

// defaults is a block that sets nothing: its attributes' defaults.
func defaults(attrs []sdk.Attribute, what string, rng hcl.Range) *Block {
	b := &Block{Type: what, Range: rng, Values: map[string]any{}, Unknown: map[string]bool{}, Sensitive: map[string]bool{}}
	for _, a := range attrs {
		if a.Default != nil {
			b.Values[a.Name] = a.Default
		}
	}
	return b
}

// Archive returns the archive called name, or the only one when name is
// "".
func (f *File) Archive(name string) (*Archive, error) {
	var names []string
	for _, a := range f.Archives {
		if a.Name == name || (name == "" && len(f.Archives) == 1) {
			return a, nil
		}
		names = append(names, a.Name)
	}
	switch {
	case len(f.Archives) == 0:
		return nil, fmt.Errorf(`%s has no archive block: add archive "NAME" { store "s3" { … } compress {} encrypt { … } }`, f.Path)
	case name == "":
		return nil, fmt.Errorf("%s has %d archives (%v): choose one with --archive", f.Path, len(names), names)
	}
	return nil, fmt.Errorf("%s has no archive %q (it has %v)", f.Path, name, names)
}

// archiveAt is where the archive block called name is, nil when there is
// none.
func (f *File) archiveAt(name string) *hcl.Range {
	for _, a := range f.Archives {
		if a.Name == name {
			return &a.Range
		}
	}
	return nil
}
