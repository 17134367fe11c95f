package plan

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/sdk"
	"github.com/pipebackup/pipe/profiles"
	"github.com/pipebackup/pipe/signing"
	"github.com/pipebackup/pipe/stages/compress"
	"github.com/pipebackup/pipe/stages/encrypt"
	"github.com/pipebackup/pipe/stages/stagekind"
	"github.com/pipebackup/pipe/wal"
	"github.com/pipebackup/pipe/wal/spool"
)

// Archive is a resolved WAL archive.
type Archive struct {
	Name string
	Def  *pipefile.Archive
	// Codec is nil when segments are stored as they are.
	Codec *compress.Codec
	Level int
	// Encrypt and Decrypt are the keys of push and fetch, nil without.
	Encrypt, Decrypt *encrypt.Keys
	// SystemID is the configured system identifier, 0 to read it.
	SystemID    uint64
	SegmentSize int64
	// Background is the background attribute: who pushes ahead and
	// prefetches (spool.Background).
	Background string
	// Push and fetch settings.
	Async       bool
	Workers     int
	PushSpool   string
	PushTimeout int64 // nanoseconds
	MaxBacklog  int
	Prefetch    int
	FetchSpool  string
	Retries     int
	// StateMemory is a codec's state for one file; EndpointMemory what
	// the store buffers with inFlight objects at once.
	StateMemory, EndpointMemory int64
	// CPUs are the host's: as many files are encoded or decoded at once
	// (wal.Coders).
	CPUs int
	// Sign is the key push signs each object's name with; Trust the keys
	// fetch, list and verify accept objects signed by (nil: none, or the
	// load left the block unread).
	Sign  *signing.PrivateKey
	Trust signing.Trust
	// Binlog, for an archive of a MariaDB server's binlog (a binlog
	// block), is where the binlog is and how closely it is followed.
	Binlog *Binlog
}

// Binlog is a binlog block, resolved.
type Binlog struct {
	// Base is the server's log_bin_basename.
	Base     string
	MaxLag   time.Duration
	PartSize int64
}

// Ext is what the archive's stages add to a segment's object name.
func (a *Archive) Ext() string { return wal.Ext(a.Codec, a.Encrypt != nil || a.Decrypt != nil) }

// Budget is the most memory a push or fetch process holds: files stream
// through it (wal.Memory), so it does not grow with the segment size.
func (a *Archive) Budget() int64 {
	files := a.fileMemory()
	if a.Binlog != nil {
		files = a.binlogMemory()
	}
	b := files + a.EndpointMemory + WALRuntimeMemory
	if a.storeProcess() != "" {
		b += PluginMemory
	}
	return b
}

// fileMemory is what the files in flight hold: each its block and
// encryption's state, a codec's state per CPU, and the stored bytes held
// before they go up (wal.Memory).
func (a *Archive) fileMemory() int64 {
	return wal.Memory(a.Codec, a.Level, a.Encrypt != nil || a.Decrypt != nil, a.inFlight(), a.coders(), wal.DefaultStoredMemory)
}

// binlogMemory is what pipe binlog archive or fetch holds of one
// segment: its bytes, its compressed copy and its sealed (or opened)
// one, and the codec's state.
func (a *Archive) binlogMemory() int64 { return 3*a.Binlog.PartSize + a.StateMemory }

// coders is how many files a pipe wal process encodes or decodes at
// once: one per CPU (wal.Coders).
func (a *Archive) coders() int { return max(a.CPUs, 1) }

// WALRuntimeMemory is what a pipe wal process needs besides its files and
// its store: the pages of pipe's binary it maps (all of them, 45 MB, on a
// kernel that maps a cached file's large folios whole), the Go runtime
// and its heap's slack, the store's client. Measured: a pipe wal push of
// a file archived already (nothing encoded) peaks at 55 MiB of RSS.
const WALRuntimeMemory = 56 << 20

// WALBinaryMemory is the part of WALRuntimeMemory that is pipe's binary
// mapped (RssFile of a pipe wal process): pages of the page cache, which
// the Go runtime does not count.
const WALBinaryMemory = 45 << 20

// GoMemoryLimit is the Go runtime's soft memory limit for a pipe wal
// process: the budget without the binary's pages, so that the collector
// works harder before the process as a whole outgrows the budget.
func (a *Archive) GoMemoryLimit() int64 { return a.Budget() - WALBinaryMemory }

// inFlight is the most segments one pipe process holds: an async push's
// workers, or the prefetcher's (prefetch, at most wal.PrefetchAtOnce at
// once).
func (a *Archive) inFlight() int {
	n := 1
	if a.Async {
		n = a.Workers
	}
	return max(n, min(a.Prefetch, wal.PrefetchAtOnce))
}

// resolveArchive resolves an archive block: its attributes, its stages
// (on the profile's defaults), its push and fetch settings and the memory
// they take.
func resolveArchive(def *pipefile.Archive, o Options) (*Archive, hcl.Diagnostics) {
	a := &Archive{Name: def.Name, Def: def, CPUs: o.Host.CPUs}
	diags := a.resolveAttrs(def)
	diags = append(diags, a.resolveStages(def, o)...)
	diags = append(diags, a.resolvePushFetch(def)...)
	diags = append(diags, a.resolveBinlog(def)...)
	var d hcl.Diagnostics
	a.Sign, a.Trust, d = resolveSigning(def.Sign, def.Trust)
	diags = append(diags, d...)
	if a.Codec != nil && !diags.HasErrors() {
		a.StateMemory = a.Codec.FrameMemory(a.Level, wal.FrameSize)
	}
	if def.Store != nil {
		a.EndpointMemory = a.storeMemory(o, def.Store)
	}
	return a, diags
}

// resolveAttrs checks and takes the archive block's own attributes: the
// system identifier, the segment size, background.
func (a *Archive) resolveAttrs(def *pipefile.Archive) hcl.Diagnostics {
	var diags hcl.Diagnostics
	if s := def.Attrs.String("system_identifier"); s != "" {
		id, err := strconv.ParseUint(s, 10, 64)
		if err != nil || id == 0 {
			diags = append(diags, errAt(def.Attrs.AttrRange("system_identifier"), "Invalid system_identifier",
				fmt.Sprintf("%q is not a system identifier: pg_controldata prints it as \"Database system identifier\", a number such as 7301234567890123456.", s)))
		}
		a.SystemID = id
	}
	a.SegmentSize, _ = def.Attrs.Int("segment_size")
	if n := a.SegmentSize; n < 1<<20 || n > 1<<30 || n&(n-1) != 0 {
		diags = append(diags, errAt(def.Attrs.AttrRange("segment_size"), "Invalid segment_size",
			fmt.Sprintf("%s is not a WAL segment size: PostgreSQL makes powers of two from 1MiB to 1GiB.", pipefile.HumanSize(n))))
	}
	a.Background = def.Attrs.String("background")
	if !slices.Contains(spool.BackgroundModes, a.Background) {
		diags = append(diags, errAt(def.Attrs.AttrRange("background"), "Invalid background",
			fmt.Sprintf("background = %q: give \"auto\" (a background process where PID 1 is a known init), \"always\" (whatever PID 1 is: only where it reaps orphans and is not PostgreSQL) or \"never\".", a.Background)))
	}
	return diags
}

// resolveStages resolves the archive's stages on the defaults of the
// profile --profile names (or the default one) and takes their settings.
func (a *Archive) resolveStages(def *pipefile.Archive, o Options) hcl.Diagnostics {
	var diags hcl.Diagnostics
	name := profiles.Default
	if o.Profile != "" {
		name = o.Profile
	}
	prof, err := profiles.Resolve(name, o.Host)
	if err != nil {
		prof, _ = profiles.Resolve(profiles.Default, o.Host)
	}
	p := &Pipeline{Name: "archive " + def.Name, Profile: prof, ChunkSize: int(prof.ChunkSize)}
	for _, b := range def.Stages {
		s, d := resolveStage(b, p)
		diags = append(diags, d...)
		if s != nil {
			diags = append(diags, a.useStage(s, b)...)
		}
	}
	return diags
}

// useStage takes a resolved stage's settings: compress's codec and level,
// the keys of encrypt and decrypt (recipients and identities, never a
// passphrase).
func (a *Archive) useStage(s *Stage, b *pipefile.Block) hcl.Diagnostics {
	switch s.Type {
	case stagekind.Compress.Name:
		if s.Codec != "none" {
			a.Codec, _ = compress.Lookup(s.Codec)
			a.Level = s.Level
		}
	case stagekind.Encrypt.Name, stagekind.Decrypt.Name:
		if s.Keys.Passphrase() {
			return hcl.Diagnostics{errAt(b.AttrRange("passphrase"), "No passphrase in an archive",
				"Each WAL segment is encrypted on its own, and a passphrase costs a second of scrypt per segment: use recipients (and identities to fetch).")}
		}
		keys := s.Keys
		if s.Type == stagekind.Encrypt.Name {
			a.Encrypt = &keys
		} else {
			a.Decrypt = &keys
		}
	}
	return nil
}

// resolveBinlog checks and takes the binlog block's settings.
func (a *Archive) resolveBinlog(def *pipefile.Archive) hcl.Diagnostics {
	b := def.Binlog
	if b == nil {
		return nil
	}
	var diags hcl.Diagnostics
	a.Binlog = &Binlog{Base: b.String("path")}
	if d, ok := b.Values["max_lag"].(time.Duration); ok {
		a.Binlog.MaxLag = d
	}
	if n, ok := b.Int("part_size"); ok {
		a.Binlog.PartSize = n
	}
	if !filepath.IsAbs(a.Binlog.Base) && !b.Unknown["path"] {
		diags = append(diags, errAt(b.AttrRange("path"), "Invalid path", fmt.Sprintf("path = %q: give the server's log_bin_basename as an absolute path, e.g. \"/var/lib/mysql/mysql-bin\" (SELECT @@log_bin_basename).", a.Binlog.Base)))
	}
	if a.Binlog.MaxLag < 10*time.Millisecond || a.Binlog.MaxLag > time.Hour {
		diags = append(diags, errAt(b.AttrRange("max_lag"), "Invalid max_lag", fmt.Sprintf("max_lag = %s: give 10ms to 1h.", a.Binlog.MaxLag)))
	}
	if a.Codec != nil && a.Codec.Name != "zstd" {
		diags = append(diags, errAt(b.Range, "Not zstd", fmt.Sprintf("A binlog archive stores each segment as one zstd frame, or as it is: compress { codec = \"zstd\" } or no compress block, not %s.", a.Codec.Name)))
	}
	if a.Binlog.PartSize < 64<<10 || a.Binlog.PartSize > 1<<30 {
		diags = append(diags, errAt(b.AttrRange("part_size"), "Invalid part_size", fmt.Sprintf("part_size = %d bytes: give 64KiB to 1GiB.", a.Binlog.PartSize)))
	}
	return diags
}

// resolvePushFetch checks and takes the push and fetch blocks' settings.
func (a *Archive) resolvePushFetch(def *pipefile.Archive) hcl.Diagnostics {
	var diags hcl.Diagnostics
	push, fetch := def.Push, def.Fetch
	a.Async, _ = push.Values["async"].(bool)
	if n, ok := push.Int("workers"); ok {
		a.Workers = int(n)
	}
	if a.Workers < 1 || a.Workers > 64 {
		diags = append(diags, errAt(push.AttrRange("workers"), "Invalid workers", fmt.Sprintf("workers = %d: give 1 to 64.", a.Workers)))
	}
	a.PushSpool = push.String("spool")
	if d, ok := push.Values["timeout"].(interface{ Nanoseconds() int64 }); ok {
		a.PushTimeout = d.Nanoseconds()
	}
	if n, ok := push.Int("max_backlog"); ok {
		a.MaxBacklog = int(n)
	}
	if n, ok := fetch.Int("prefetch"); ok {
		a.Prefetch = int(n)
	}
	if a.Prefetch < 0 || a.Prefetch > 256 {
		diags = append(diags, errAt(fetch.AttrRange("prefetch"), "Invalid prefetch", fmt.Sprintf("prefetch = %d: give 0 to 256.", a.Prefetch)))
	}
	a.FetchSpool = fetch.String("spool")
	if n, ok := fetch.Int("retries"); ok {
		a.Retries = int(n)
	}
	if a.Retries < 0 || a.Retries > 100 {
		diags = append(diags, errAt(fetch.AttrRange("retries"), "Invalid retries", fmt.Sprintf("retries = %d: give 0 to 100.", a.Retries)))
	}
	return diags
}

// MaxObject is the largest object the archive stores: a segment (no WAL
// file is larger), compressed (data that does not compress grows a
// little) and encrypted.
func (a *Archive) MaxObject() int64 {
	size := a.SegmentSize
	if a.Binlog != nil {
		size = a.Binlog.PartSize
	}
	return wal.MaxObject(size, a.Codec != nil, a.Encrypt != nil || a.Decrypt != nil)
}

// storeMemory is what the store buffers with inFlight objects at once, as
// push writes them (sink) or fetch reads them (source): together no
// larger than MaxObject (a push or fetch waits until the objects in
// transfer leave room for its own, wal.Archive.TransferMemory).
func (a *Archive) storeMemory(o Options, st *pipefile.Endpoint) int64 {
	cfg := sdk.NewConfig(st.Values)
	var most int64
	each := max(a.MaxObject()/int64(a.inFlight()), 1)
	for _, kind := range []string{"sink", "source"} {
		switch {
		case o.SmallObjectMemory != nil:
			most = max(most, o.SmallObjectMemory(kind, st.Type, cfg, a.inFlight(), each))
		case o.Memory != nil:
			most = max(most, o.Memory(kind, st.Type, cfg, a.inFlight()))
		}
	}
	return most
}

// Archive returns the resolved archive called name, or the only one.
func (pl *Plan) Archive(name string) (*Archive, error) {
	def, err := pl.File.Archive(name)
	if err != nil {
		return nil, err
	}
	for _, a := range pl.Archives {
		if a.Def == def {
			return a, nil
		}
	}
	return nil, fmt.Errorf("archive %q did not resolve", def.Name)
}

// storeProcess is the plugin process of the archive's store that pipe wal
// starts: a third-party plugin's ("" for a built-in, which pipe wal runs in
// its own process to start fast).
func (a *Archive) storeProcess() string {
	if p := a.Def.Store.Process; p != BuiltinProcess {
		return p
	}
	return ""
}

// printBinlog prints an archive of a MariaDB server's binlog.
func (a *Archive) printBinlog(w io.Writer) {
	fmt.Fprintf(w, "archive %q (MariaDB binlog: pipe binlog archive, fetch, list, verify)\n", a.Name)
	st := a.Def.Store
	fmt.Fprintf(w, "  store %-6s %s\n", st.Type, endpointAttrs(st, nil))
	if st.Key != nil {
		root, err := st.Key.Render("", "")
		if err != nil {
			root = "${" + st.Key.Attr + "}"
		}
		fmt.Fprintf(w, "               objects: %s<server_id>/<file>.<start>-<end>-<sha256 stored>%s\n", root, a.Ext())
	}
	codec := "none"
	if a.Codec != nil {
		codec = fmt.Sprintf("%s level %d, one frame a segment", a.Codec.Name, a.Level)
	}
	fmt.Fprintf(w, "  compress     %s\n", codec)
	if a.Encrypt != nil {
		fmt.Fprintf(w, "  encrypt      to %s, one age file a segment\n", Plural(len(a.Encrypt.Fingerprints), "recipient"))
	}
	if a.Decrypt != nil {
		fmt.Fprintf(w, "  decrypt      with %s\n", Plural(len(a.Decrypt.Fingerprints), "identity"))
	}
	fmt.Fprintf(w, "  binlog       %s.NNNNNN (listed in %s.index): what the server wrote is stored within %s, in segments of at most %s\n",
		a.Binlog.Base, a.Binlog.Base, a.Binlog.MaxLag, size(a.Binlog.PartSize))
	plugins := ""
	if a.storeProcess() != "" {
		plugins = fmt.Sprintf(" + %s for the plugin process", size(PluginMemory))
	}
	fmt.Fprintf(w, "  memory       %s budget (a segment, compressed and sealed: %s + store %s + runtime %s%s), whatever the binlog's size\n",
		size(a.Budget()), size(a.binlogMemory()), size(a.EndpointMemory), size(WALRuntimeMemory), plugins)
}

// BuiltinProcess is the name of the plugin process of pipe's built-in
// endpoints.
const BuiltinProcess = "builtin"

func (a *Archive) print(w io.Writer) {
	if a.Binlog != nil {
		a.printBinlog(w)
		return
	}
	fmt.Fprintf(w, "archive %q (PostgreSQL WAL: pipe wal push, fetch, list, verify)\n", a.Name)
	st := a.Def.Store
	fmt.Fprintf(w, "  store %-6s %s\n", st.Type, endpointAttrs(st, nil))
	if l := lockLine(&st.Block); l != "" {
		fmt.Fprintf(w, "               lock: %s\n", l)
	}
	if st.Key != nil {
		root, err := st.Key.Render("", "")
		if err != nil {
			root = "${" + st.Key.Attr + "}"
		}
		sig := ""
		if a.Def.Sign != nil {
			sig = "<signature>"
		}
		fmt.Fprintf(w, "               objects: %s<system id>/<timeline>/<file>-<xxh3 of the file>-<sha256 stored>%s%s\n", root, sig, a.Ext())
	}
	codec := "none"
	if a.Codec != nil {
		codec = fmt.Sprintf("%s level %d", a.Codec.Name, a.Level)
	}
	fmt.Fprintf(w, "  compress     %s\n", codec)
	if a.Encrypt != nil {
		fmt.Fprintf(w, "  encrypt      to %s\n", Plural(len(a.Encrypt.Fingerprints), "recipient"))
	}
	if a.Decrypt != nil {
		fmt.Fprintf(w, "  decrypt      with %s\n", Plural(len(a.Decrypt.Fingerprints), "identity"))
	}
	if a.Def.Sign != nil {
		fmt.Fprintf(w, "  sign         %s\n", describeSign(a.Sign, "push signs each object's name"))
	}
	if a.Def.Trust != nil {
		fmt.Fprintf(w, "  trust        %s\n", describeTrust(a.Def.Trust, a.Trust, "fetch takes only objects one of them signed; list and verify report the others"))
	}
	id := "read from the data directory's global/pg_control"
	if a.SystemID != 0 {
		id = fmt.Sprint(a.SystemID)
	}
	fmt.Fprintf(w, "  cluster      system identifier %s, segments of %s\n", id, size(a.SegmentSize))
	if a.Async || a.Prefetch > 0 {
		bg, why := spool.Background(a.Background)
		who := "archive_command and restore_command push ahead and prefetch themselves"
		if bg {
			who = "a background pusher and prefetcher"
		}
		if a.Background == spool.BackgroundAuto {
			who += ", here: " + why
		}
		fmt.Fprintf(w, "  background   %s (background = %q)\n", who, a.Background)
	}
	if a.Async {
		fmt.Fprintf(w, "  push         async: ready files pushed ahead, %s at once; more than %d waiting is an error (no WAL is dropped)\n",
			Plural(a.Workers, "file"), a.MaxBacklog)
	} else {
		fmt.Fprintf(w, "  push         one segment per archive_command, durable in the store before it returns\n")
	}
	if a.Prefetch > 0 {
		fmt.Fprintf(w, "  fetch        prefetches the next %s into %s; retries a failure %s, then stops recovery\n", Plural(a.Prefetch, "segment"), a.FetchSpool, Plural(a.Retries, "time"))
	} else {
		fmt.Fprintf(w, "  fetch        one segment per restore_command; retries a failure %s, then stops recovery\n", Plural(a.Retries, "time"))
	}
	plugins := ""
	if a.storeProcess() != "" {
		plugins = fmt.Sprintf(" + %s for the plugin process", size(PluginMemory))
	}
	fmt.Fprintf(w, "  memory       %s budget (%s in flight, streamed: %s + store %s + runtime %s%s), per pipe process, whatever the segment size\n",
		size(a.Budget()), Plural(a.inFlight(), "file"), size(a.fileMemory()), size(a.EndpointMemory), size(WALRuntimeMemory), plugins)
}

// ArchiveJSON is an archive in pipe plan --json.
type ArchiveJSON struct {
	Name        string           `json:"name"`
	Store       EndpointJSON     `json:"store"`
	Codec       string           `json:"codec,omitempty"`
	Level       int              `json:"level,omitempty"`
	Encrypted   bool             `json:"encrypted"`
	SystemID    string           `json:"system_identifier,omitempty"`
	SegmentSize int64            `json:"segment_size"`
	Background  string           `json:"background"`
	Async       bool             `json:"async"`
	Workers     int              `json:"workers"`
	Prefetch    int              `json:"prefetch"`
	Memory      map[string]int64 `json:"memory"`
	Sign        string           `json:"sign,omitempty"`
	Trust       []string         `json:"trust,omitempty"`
	// Binlog is a MariaDB binlog archive's binlog block.
	Binlog *BinlogJSON `json:"binlog,omitempty"`
}

// BinlogJSON is a binlog block in pipe plan --json.
type BinlogJSON struct {
	Path          string  `json:"path"`
	MaxLagSeconds float64 `json:"max_lag_seconds"`
	PartSize      int64   `json:"part_size"`
}

func (a *Archive) json() ArchiveJSON {
	j := ArchiveJSON{Name: a.Name, Store: endpointJSON(a.Def.Store), Level: a.Level, Encrypted: a.Encrypt != nil || a.Decrypt != nil,
		SegmentSize: a.SegmentSize, Background: a.Background, Async: a.Async, Workers: a.Workers, Prefetch: a.Prefetch,
		Memory: map[string]int64{"budget": a.Budget(), "runtime": WALRuntimeMemory, "files": a.fileMemory(),
			"codec": int64(min(a.coders(), a.inFlight())) * a.StateMemory, "store": a.EndpointMemory}}
	if a.Codec != nil {
		j.Codec = a.Codec.Name
	}
	j.Sign, j.Trust = fingerprint(a.Sign), a.Trust.Fingerprints()
	if a.SystemID != 0 {
		j.SystemID = fmt.Sprint(a.SystemID)
	}
	if a.storeProcess() != "" {
		j.Memory["plugins"] = PluginMemory
	}
	if a.Binlog != nil {
		j.Binlog = &BinlogJSON{Path: a.Binlog.Base, MaxLagSeconds: a.Binlog.MaxLag.Seconds(), PartSize: a.Binlog.PartSize}
		delete(j.Memory, "codec")
		j.Memory["files"] = a.binlogMemory()
	}
	return j
}
