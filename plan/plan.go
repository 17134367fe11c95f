package plan

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/engine"
	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
)

// Options steer resolution.
type Options struct {
	// Profile, when set (--profile), beats the file's profile.
	Profile string
	// Host is the machine the profiles resolve for.
	Host profiles.Host
	// Memory, if set, returns what an endpoint buffers on its own with
	// this config and streams objects in flight (sdk.MemoryEstimator).
	Memory func(kind, typ string, cfg sdk.Config, streams int) int64
	// SmallObjectMemory, if set, is Memory for objects of at most maxObject
	// bytes (sdk.SmallObjectMemoryEstimator): what an archive's store
	// holds, whose objects are at most a segment. Without it, archives are
	// counted by Memory.
	SmallObjectMemory func(kind, typ string, cfg sdk.Config, streams int, maxObject int64) int64
	// Overrides beat the file and the profile (pipe bench's sweeps), by
	// knob (see Knobs).
	Overrides map[string]int64
}

// Knobs are the settings Options.Overrides can set: the pipeline's
// chunk_size (and the compress frame size) and streams, the workers of
// chunk-parallel stages, compress's level, and the endpoints' attributes
// that take the profile's part_size and concurrency.
var Knobs = []string{"workers", "chunk_size", "streams", "level", "part_size", "concurrency"}

// Plan is a resolved pipeline file.
type Plan struct {
	File      *pipefile.File
	Host      profiles.Host
	Pipelines []*Pipeline
	Archives  []*Archive
}

// Pipeline is one resolved pipeline.
type Pipeline struct {
	Name    string
	Def     *pipefile.Pipeline
	Profile profiles.Profile
	// ProfileFrom says where the profile came from: "flag", "file" or
	// "default".
	ProfileFrom string
	ChunkSize   int
	Streams     int
	Depth       int
	// Buffers is the file's explicit buffer count, 0 for the default.
	Buffers int
	Stages  []*Stage
	Source  *pipefile.Endpoint
	Sinks   []*pipefile.Endpoint
	// Layout is the buffer layout and memory budget. For a restore whose
	// codec comes from the manifest it assumes zstd, the largest.
	Layout engine.Layout
	// EndpointMemory is what the source and sinks buffer on their own.
	EndpointMemory int64
	// DedupRestoreMemory is what restoring or copying a deduplicated run
	// takes beyond Layout (see dedupRestoreMemory); 0 for a pipeline that
	// cannot.
	DedupRestoreMemory int64
	// FromProfile lists, by endpoint, the attributes the profile set.
	FromProfile map[*pipefile.Endpoint][]string
	// Sign is the key the run's manifests are signed with (nil: not
	// signed); Trust the keys whose signatures the runs it reads must
	// bear (nil: not checked).
	Sign  *signing.PrivateKey
	Trust signing.Trust
}

// Stage is one resolved stage.
type Stage struct {
	// Type is the stage's kind's name (see Kind).
	Type string
	Def  *pipefile.Block
	// Codec is set for compress and decompress ("auto" until the run
	// knows it).
	Codec     string
	Level     int
	Workers   int
	ChunkSize int
	Keys      encrypt.Keys
	// Explicit lists the settings the file gave (the rest come from the
	// profile).
	Explicit map[string]bool
	// Implicit is set on the checksum stage a backup gets without a
	// checksum block: every object a manifest names has a digest.
	Implicit bool
	// writesRunKey: a passphrase encrypt stage whose every sink stores,
	// so the run encrypts to a run key (see runner).
	writesRunKey bool
	// Dedup is the dedup stage's settings.
	Dedup *Dedup
	// absorbed: a compress or encrypt stage of a pipeline with a dedup
	// stage, which seals each chunk with their settings; they do not run
	// on the stream.
	absorbed bool
}

// Restores reports whether the pipeline's last transforming stage decodes:
// its output is plain data, so it writes no manifest.
func (p *Pipeline) Restores() bool {
	for i := len(p.Stages) - 1; i >= 0; i-- {
		if p.Stages[i].Encodes() {
			return false
		}
		if p.Stages[i].Decodes() {
			return true
		}
	}
	return false
}

// WritesManifest reports whether a run of the pipeline writes a manifest
// as far as the file tells: it stores (a storage sink with an object path)
// and does not decode. (A pipeline without decoding stages that reads a
// backup through its manifest copies it, which the run finds out.)
func (p *Pipeline) WritesManifest() bool {
	if p.Restores() {
		return false
	}
	for _, s := range p.Sinks {
		if s.Stores() {
			return true
		}
	}
	return false
}

// Stage returns the pipeline's stage of type t, or nil.
func (p *Pipeline) Stage(t string) *Stage {
	for _, s := range p.Stages {
		if s.Type == t {
			return s
		}
	}
	return nil
}

// Ext is what the pipeline's encoding stages append to a stream's name.
func (p *Pipeline) Ext() string {
	var b strings.Builder
	for _, s := range p.Stages {
		b.WriteString(s.Ext())
	}
	return b.String()
}

// MinChunk and MaxChunk bound every chunk size.
const (
	MinChunk = 4 << 10
	MaxChunk = 1 << 30
)

// New resolves every pipeline of f.
func New(f *pipefile.File, o Options) (*Plan, hcl.Diagnostics) {
	pl := &Plan{File: f, Host: o.Host}
	var diags hcl.Diagnostics
	if o.Profile != "" {
		if _, err := profiles.Resolve(o.Profile, o.Host); err != nil {
			return nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "Unknown profile", Detail: "--profile: " + err.Error() + "."}}
		}
	}
	for _, def := range f.Pipelines {
		p, d := resolve(def, o)
		diags = append(diags, d...)
		if p != nil {
			pl.Pipelines = append(pl.Pipelines, p)
		}
	}
	for _, def := range f.Archives {
		a, d := resolveArchive(def, o)
		diags = append(diags, d...)
		pl.Archives = append(pl.Archives, a)
	}
	for _, p := range pl.Pipelines {
		if name := p.Def.Attrs.String("wal_archive"); name != "" {
			if _, err := pl.Archive(name); err != nil {
				diags = append(diags, errAt(p.Def.Attrs.AttrRange("wal_archive"), "Unknown archive", "wal_archive: "+err.Error()+"."))
			}
		}
	}
	return pl, diags
}

// WALArchive is the archive that holds the WAL a pipeline's base backups
// need: its wal_archive, or the file's only archive; nil when there is
// none to choose.
func (pl *Plan) WALArchive(p *Pipeline) *Archive {
	a, err := pl.Archive(p.Def.Attrs.String("wal_archive"))
	if err != nil {
		return nil
	}
	return a
}

func errAt(rng hcl.Range, summary, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: rng.Ptr()}
}

func warnAt(rng hcl.Range, summary, detail string) *hcl.Diagnostic {
	return &hcl.Diagnostic{Severity: hcl.DiagWarning, Summary: summary, Detail: detail, Subject: rng.Ptr()}
}

// resolve resolves one pipeline: its profile, its sizes, its endpoints'
// settings, its stages, and the memory it takes.
func resolve(def *pipefile.Pipeline, o Options) (*Pipeline, hcl.Diagnostics) {
	p := &Pipeline{Name: def.Name, Def: def, Source: def.Source, Sinks: def.Sinks}
	diags := p.resolveProfile(o)
	diags = append(diags, p.resolveSizes(o)...)
	p.FromProfile = map[*pipefile.Endpoint][]string{}
	for _, e := range append([]*pipefile.Endpoint{def.Source}, def.Sinks...) {
		if e == nil {
			continue
		}
		p.FromProfile[e] = applyProfile(e, p.Profile)
		applyOverrides(e, o.Overrides)
		diags = append(diags, checkRetention(e)...)
	}
	if _, set := def.Attrs.Int("streams"); !set && o.Overrides["streams"] == 0 {
		p.Streams = max(p.Streams, endpointJobs(def))
	}
	for _, b := range def.Stages {
		s, d := resolveStage(b, p)
		diags = append(diags, d...)
		if s != nil {
			diags = append(diags, overrideStage(s, o.Overrides)...)
			p.Stages = append(p.Stages, s)
		}
	}
	diags = append(diags, checkOrder(p)...)
	diags = append(diags, checkDedup(p)...)
	diags = append(diags, p.resolveSigning()...)
	if diags.HasErrors() {
		return p, diags
	}
	p.addRunKeyAndChecksum()
	return p, append(diags, p.resolveMemory(o)...)
}

// resolveProfile picks the profile (--profile, else the file's, else the
// default) and takes its sizes.
func (p *Pipeline) resolveProfile(o Options) hcl.Diagnostics {
	var diags hcl.Diagnostics
	a := p.Def.Attrs
	name, from := profiles.Default, "default"
	if a.Has("profile") && !a.Unknown["profile"] {
		name, from = a.String("profile"), "file"
	}
	if o.Profile != "" {
		name, from = o.Profile, "flag"
	}
	prof, err := profiles.ResolveFor(name, o.Host, expectedStreams(p.Def, o))
	if err != nil {
		diags = append(diags, errAt(a.AttrRange("profile"), "Unknown profile", err.Error()+"."))
		prof, _ = profiles.Resolve(profiles.Default, o.Host)
	}
	p.Profile, p.ProfileFrom = prof, from
	p.ChunkSize, p.Streams, p.Depth = int(prof.ChunkSize), prof.Streams, prof.Depth
	return diags
}

// resolveSizes takes the file's chunk_size, streams and buffers, and the
// overrides of the first two.
func (p *Pipeline) resolveSizes(o Options) hcl.Diagnostics {
	var diags hcl.Diagnostics
	a := p.Def.Attrs
	if n, ok := a.Int("chunk_size"); ok {
		if d := checkChunk(a, "chunk_size", n); d != nil {
			diags = append(diags, d)
		} else {
			p.ChunkSize = int(n)
		}
	}
	if n, ok := a.Int("streams"); ok {
		if n < 1 || n > 1024 {
			diags = append(diags, errAt(a.AttrRange("streams"), "Invalid streams", fmt.Sprintf("streams = %d: at least 1 and at most 1024 streams can move at once.", n)))
		} else {
			p.Streams = int(n)
		}
	}
	if n, ok := o.Overrides["chunk_size"]; ok {
		p.ChunkSize = int(n)
	}
	if n, ok := o.Overrides["streams"]; ok {
		p.Streams = int(n)
	}
	if n, ok := a.Int("buffers"); ok {
		if n < 1 || n > 1<<16 {
			diags = append(diags, errAt(a.AttrRange("buffers"), "Invalid buffers", fmt.Sprintf("buffers = %d must be between 1 and 65536.", n)))
		} else {
			p.Buffers = int(n)
		}
	}
	return diags
}

// addRunKeyAndChecksum completes the stages of a valid pipeline: a
// passphrase encrypt stage whose every sink stores writes a run key, and
// a pipeline that writes a manifest gets a checksum stage if it has none.
func (p *Pipeline) addRunKeyAndChecksum() {
	if e := p.Stage(stagekind.Encrypt.Name); e != nil && !p.Restores() {
		e.writesRunKey = len(p.Sinks) > 0
		for _, s := range p.Sinks {
			e.writesRunKey = e.writesRunKey && s.Stores()
		}
	}
	if p.WritesManifest() && p.Stage(stagekind.Checksum.Name) == nil {
		p.Stages = append(p.Stages, &Stage{Type: stagekind.Checksum.Name, Def: &pipefile.Block{Type: stagekind.Checksum.Name, Range: p.Def.Range}, Workers: 1, ChunkSize: p.ChunkSize, Explicit: map[string]bool{}, Implicit: true})
	}
}

// resolveMemory lays out the buffers of a valid pipeline (the memory
// budget) and adds what its endpoints buffer on their own.
func (p *Pipeline) resolveMemory(o Options) hcl.Diagnostics {
	job, err := p.Job("", 0)
	if err != nil {
		return hcl.Diagnostics{errAt(p.Def.Range, "Invalid pipeline", err.Error())}
	}
	var diags hcl.Diagnostics
	l, err := job.Layout()
	if err != nil {
		diags = append(diags, errAt(p.Def.Attrs.AttrRange("buffers"), "Too few buffers", err.Error()+"."))
	}
	p.Layout = l
	p.DedupRestoreMemory = p.dedupRestoreMemory(job, l)
	if o.Memory != nil {
		for _, e := range append([]*pipefile.Endpoint{p.Def.Source}, p.Def.Sinks...) {
			if e == nil {
				continue
			}
			streams := p.Streams
			if e.Kind == "sink" && p.Dedup() != nil {
				streams++ // the open pack, beside the streams' lists
			}
			p.EndpointMemory += o.Memory(e.Kind, e.Type, sdk.NewConfig(e.Values), streams)
		}
	}
	return diags
}

// expectedStreams is how many streams the pipeline will move at once as
// far as the file tells, for "auto": the file's streams, else an
// endpoint's jobs, else 0 (not known before the source lists them).
func expectedStreams(def *pipefile.Pipeline, o Options) int {
	if n, ok := o.Overrides["streams"]; ok && n > 0 {
		return int(n)
	}
	if n, ok := def.Attrs.Int("streams"); ok && n > 0 {
		return int(n)
	}
	return endpointJobs(def)
}

// endpointJobs is the most streams an endpoint moves at once by its own
// "jobs" attribute (a database dumped or restored table by table): the
// run moves at least that many streams at once unless the file sets
// streams.
func endpointJobs(def *pipefile.Pipeline) int {
	n := 0
	for _, e := range append([]*pipefile.Endpoint{def.Source}, def.Sinks...) {
		if e == nil {
			continue
		}
		if j, ok := e.Values["jobs"].(int64); ok && j > 1 && j <= 1024 {
			n = max(n, int(j))
		}
	}
	return n
}

// applyProfile gives the endpoint's attributes that take a profile setting
// (part size, concurrency) the profile's value when the file does not set
// them; it returns their names.
func applyProfile(e *pipefile.Endpoint, prof profiles.Profile) []string {
	var set []string
	for _, a := range e.Schema.Attributes {
		if a.Profile == "" || e.Set(a.Name) {
			continue
		}
		switch a.Profile {
		case "part_size":
			e.Values[a.Name] = prof.PartSize
		case "concurrency":
			e.Values[a.Name] = int64(prof.Concurrency)
		default:
			continue
		}
		set = append(set, a.Name)
	}
	return set
}

// applyOverrides sets the endpoint's attributes that take a profile
// setting to the overriding value, if any.
func applyOverrides(e *pipefile.Endpoint, ov map[string]int64) {
	for _, a := range e.Schema.Attributes {
		if n, ok := ov[a.Profile]; ok && a.Profile != "" {
			e.Values[a.Name] = n
		}
	}
}

// overrideStage applies the overrides that concern a stage: workers and
// chunk_size of chunk-parallel stages, compress's level.
func overrideStage(s *Stage, ov map[string]int64) hcl.Diagnostics {
	if n, ok := ov["workers"]; ok {
		s.Workers = int(n)
	}
	if n, ok := ov["chunk_size"]; ok {
		s.ChunkSize = int(n)
	}
	if n, ok := ov["level"]; ok && s.Kind() == stagekind.Compress && !s.Idle() {
		if c, known := compress.Lookup(s.Codec); known {
			if err := c.CheckLevel(int(n)); err != nil {
				return hcl.Diagnostics{errAt(s.Def.Range, "Invalid compression level", fmt.Sprintf("level %d (overriding the file): %v.", n, err))}
			}
			s.Level = int(n)
		}
	}
	return nil
}

// checkRetention: deleting older runs needs each run in its own place.
func checkRetention(e *pipefile.Endpoint) hcl.Diagnostics {
	if !e.Retention.Set() {
		return nil
	}
	if e.Key == nil || !e.Key.UsesRunID() {
		return hcl.Diagnostics{errAt(e.AttrRange(e.Retention.Attr()), "Retention needs a place per run",
			e.Retention.Attr()+" deletes older runs, so each run must have its own objects: put ${run.id} in the sink's path, e.g. \"backups/${pipeline.name}/${run.id}/\".")}
	}
	return nil
}

func checkChunk(b *pipefile.Block, attr string, n int64) *hcl.Diagnostic {
	if n < MinChunk || n > MaxChunk {
		return errAt(b.AttrRange(attr), "Invalid chunk size", fmt.Sprintf("%s = %s is out of range: use between %s and %s.", attr, pipefile.HumanSize(n), pipefile.HumanSize(MinChunk), pipefile.HumanSize(MaxChunk)))
	}
	return nil
}

func resolveStage(b *pipefile.Block, p *Pipeline) (*Stage, hcl.Diagnostics) {
	var diags hcl.Diagnostics
	k := stagekind.Lookup(b.Type)
	s := &Stage{Type: b.Type, Def: b, Workers: p.Profile.Workers, ChunkSize: p.ChunkSize, Explicit: map[string]bool{}}
	for _, a := range k.Attributes {
		if b.Set(a.Name) {
			s.Explicit[a.Name] = true
		}
	}
	if n, ok := b.Int("workers"); ok {
		if n < 1 || n > 1024 {
			diags = append(diags, errAt(b.AttrRange("workers"), "Invalid workers", fmt.Sprintf("workers = %d: give between 1 and 1024 workers.", n)))
		} else {
			s.Workers = int(n)
		}
	}
	if n, ok := b.Int("chunk_size"); ok {
		if d := checkChunk(b, "chunk_size", n); d != nil {
			diags = append(diags, d)
		} else {
			s.ChunkSize = int(n)
		}
	}
	if b.Unknown["codec"] || b.Unknown["level"] || b.Unknown["algorithm"] {
		// Known at run time only: plan with the defaults, check at run.
		if a, ok := k.Attribute("codec"); ok {
			s.Codec, _ = a.Default.(string)
		}
		s.Level = 3
		return s, diags
	}
	keep, d := kindOps[k].resolve(s, b, p)
	diags = append(diags, d...)
	if !keep {
		return nil, diags
	}
	return s, diags
}

// checkOrder enforces the order data must meet stages in: compress before
// encrypt (warned: encrypted data does not compress), decrypt before
// decompress, decoding before encoding, checksum last.
func checkOrder(p *Pipeline) hcl.Diagnostics {
	var diags hcl.Diagnostics
	idx := map[*stagekind.Kind]int{}
	for i, s := range p.Stages {
		idx[s.Kind()] = i
	}
	at := func(k *stagekind.Kind) (int, bool) { i, ok := idx[k]; return i, ok }
	if c, ok := at(stagekind.Compress); ok {
		if e, ok := at(stagekind.Encrypt); ok && e < c && !p.Stages[c].Idle() {
			diags = append(diags, warnAt(p.Stages[c].Def.Range, "Compress after encrypt",
				"Encrypted data looks random and does not compress: put compress before encrypt."))
		}
	}
	if d, ok := at(stagekind.Decompress); ok {
		if x, ok := at(stagekind.Decrypt); ok && d < x {
			diags = append(diags, errAt(p.Stages[d].Def.Range, "Decompress before decrypt",
				"Backups are compressed, then encrypted: a restore decrypts first. Put decrypt before decompress."))
		}
	}
	for _, pair := range decodeEncodePairs() {
		dec, ok1 := at(pair[0])
		enc, ok2 := at(pair[1])
		if ok1 && ok2 && enc < dec {
			d, e := pair[0].Name, pair[1].Name
			diags = append(diags, errAt(p.Stages[dec].Def.Range, d+" after "+e,
				fmt.Sprintf("%s reads back what a backup stored; it cannot follow %s in the same pipeline. To convert a backup, %s first.", d, e, d)))
		}
	}
	if c, ok := at(stagekind.Checksum); ok && c != len(p.Stages)-1 {
		diags = append(diags, errAt(p.Stages[c].Def.Range, "Checksum is not last",
			fmt.Sprintf("checksum records the digest of the bytes the sinks store, so it must be the last stage; %s follows it.", p.Stages[c+1].Type)))
	}
	return diags
}

// decodeEncodePairs is every decoding kind with every encoding kind, none
// of which may follow the other in one pipeline: first each decoder with
// the kind it undoes, then the other pairs by encoder.
func decodeEncodePairs() [][2]*stagekind.Kind {
	var pairs [][2]*stagekind.Kind
	for _, d := range stagekind.All {
		if d.Decodes() {
			pairs = append(pairs, [2]*stagekind.Kind{d, d.Undoes})
		}
	}
	for _, e := range stagekind.All {
		for _, d := range stagekind.All {
			if e.Encodes() && d.Decodes() && d.Undoes != e {
				pairs = append(pairs, [2]*stagekind.Kind{d, e})
			}
		}
	}
	return pairs
}
