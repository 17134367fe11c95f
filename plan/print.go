package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pipebackup/pipe/pipefile"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// RuntimeMemory is what the pipe process needs besides the layout: the Go
// runtime and heap slack, goroutine stacks, the endpoints' small buffers.
// The memory benchmark checks that the peak RSS of pipe and its plugin
// processes stays within Budget.
const RuntimeMemory = 48 << 20

// PluginMemory is what one plugin process needs: its runtime, gRPC's
// buffers, a stream's 1 MiB read buffer. Files and pipes are handed to
// pipe (no data copies in between); data sent in messages is bounded by
// gRPC's flow-control windows, which this includes for two streams.
const PluginMemory = 40 << 20

// Processes lists the plugin processes the pipeline's endpoints run in.
func (p *Pipeline) Processes() []string {
	seen := map[string]bool{}
	var out []string
	for _, e := range append([]*pipefile.Endpoint{p.Source}, p.Sinks...) {
		if e.Process != "" && !seen[e.Process] {
			seen[e.Process] = true
			out = append(out, e.Process)
		}
	}
	return out
}

// Budget is the run's memory budget: the layout, what the endpoints buffer
// on their own, pipe's runtime and its plugin processes.
func (p *Pipeline) Budget() int64 {
	return p.Layout.Total + p.DedupRestoreMemory + p.EndpointMemory + RuntimeMemory + int64(len(p.Processes()))*PluginMemory
}

var size = pipefile.HumanSize

// Print writes the plan for people.
func (pl *Plan) Print(w io.Writer) {
	for i, p := range pl.Pipelines {
		if i > 0 {
			fmt.Fprintln(w)
		}
		p.print(w, pl.Host.CPUs)
	}
	for i, a := range pl.Archives {
		if i > 0 || len(pl.Pipelines) > 0 {
			fmt.Fprintln(w)
		}
		a.print(w)
	}
	if pl.File != nil && len(pl.File.Notifies)+len(pl.File.Drills) > 0 {
		fmt.Fprintln(w)
		for _, n := range pl.File.Notifies {
			printNotify(w, n)
		}
		for _, d := range pl.File.Drills {
			printDrill(w, d)
		}
	}
}

func (p *Pipeline) print(w io.Writer, cpus int) {
	fmt.Fprintf(w, "pipeline %q\n", p.Name)
	fmt.Fprintf(w, "  profile     %s (%s) on %d CPUs: chunk_size %s, %s, %s, queue depth %d\n",
		p.Profile.Name, map[string]string{"flag": "from --profile", "file": "from the file", "default": "default"}[p.ProfileFrom],
		cpus, size(p.Profile.ChunkSize), Plural(p.Profile.Workers, "worker"), Plural(p.Profile.Streams, "stream"), p.Profile.Depth)
	if p.Profile.Rule != "" {
		fmt.Fprintf(w, "  auto        %s\n", p.Profile.Rule)
	}
	fmt.Fprintf(w, "  settings    chunk_size %s, streams %d, buffers %d\n", size(int64(p.ChunkSize)), p.Streams, p.Layout.Buffers)
	if p.Def.RateLimit > 0 {
		fmt.Fprintf(w, "  rate limit  %s/s read from the source, all streams together\n", size(p.Def.RateLimit))
	}
	fmt.Fprintf(w, "  source %-5s %s\n", p.Source.Type, endpointAttrs(p.Source, p.FromProfile[p.Source]))
	for _, s := range p.Stages {
		fmt.Fprintf(w, "  → %-10s %s\n", s.Type, s.describe())
	}
	for _, k := range p.Sinks {
		fmt.Fprintf(w, "  → sink %-5s %s\n", k.Type, endpointAttrs(k, p.FromProfile[k]))
		if k.RateLimit > 0 {
			fmt.Fprintf(w, "               rate limit: %s/s given to this sink, all streams and parts together\n", size(k.RateLimit))
		}
		if k.Key != nil {
			fmt.Fprintf(w, "               objects: %s\n", objectsLine(p, k))
		}
		if k.Retention.Set() {
			fmt.Fprintf(w, "               retention: after a successful run, keep %s of this pipeline, and pinned runs; delete older runs and leftovers of failed ones\n", k.Retention)
		}
		if l := lockLine(&k.Block); l != "" {
			fmt.Fprintf(w, "               lock: %s\n", l)
		}
	}
	if p.Def.Sign != nil {
		fmt.Fprintf(w, "  sign        %s\n", describeSign(p.Sign, "each run's manifest is signed"))
	}
	if p.Def.Trust != nil {
		fmt.Fprintf(w, "  trust       %s\n", describeTrust(p.Def.Trust, p.Trust, "only runs one of them signed are read"))
	}
	printHooks(w, p.Def)
	fmt.Fprintf(w, "  buffers    ")
	for i, pos := range p.Layout.Positions {
		sep := ","
		if i == 0 {
			sep = ""
		}
		fmt.Fprintf(w, "%s %s %d × %s", sep, pos.Name, pos.Buffers, size(int64(pos.BufferSize)))
	}
	fmt.Fprintf(w, " = %s\n", size(p.Layout.Chunks))
	plugins := ""
	if n := len(p.Processes()); n > 0 {
		plugins = fmt.Sprintf(" + %s for %s", size(int64(n)*PluginMemory), Plural(n, "plugin process"))
	}
	dd := ""
	if p.DedupRestoreMemory > 0 {
		dd = " + " + size(p.DedupRestoreMemory) + " more for a deduplicated run"
	}
	fmt.Fprintf(w, "  memory      %s budget (chunks %s + stage state %s%s + endpoints %s + runtime %s%s), whatever the input size\n",
		size(p.Budget()), size(p.Layout.Chunks), size(p.Layout.State), dd, size(p.EndpointMemory), size(RuntimeMemory), plugins)
}

func objectsLine(p *Pipeline, k *pipefile.Endpoint) string {
	ext := p.Ext()
	manifest := "no manifest (a restore)"
	switch {
	case !p.Restores() && k.Stores():
		manifest = "manifest at " + placeholderKey(k.Key, true, ext)
	case !k.Schema.Storage:
		manifest = "no manifest (not storage)"
	case !k.Stores():
		manifest = "no manifest (it consumes its streams)"
	}
	switch k.Key.Kind {
	case pipefile.KeyFolder:
		return fmt.Sprintf("a folder: each stream at %s; %s", placeholderKey(k.Key, false, ext), manifest)
	case pipefile.KeyObject:
		return "one object (the source must yield one stream); " + manifest
	}
	return fmt.Sprintf("%s per stream; %s", placeholderKey(k.Key, false, ext), manifest)
}

// placeholderKey renders a key with ${…} placeholders for what is known at
// run time only.
func placeholderKey(k *pipefile.KeyTemplate, manifest bool, ext string) string {
	k = k.Preview()
	var s string
	var err error
	if manifest {
		s, err = k.ManifestKey()
	} else {
		s, err = k.Render("${stream.name}", ext)
	}
	if err != nil {
		return k.Text
	}
	return s
}

// endpointAttrs prints an endpoint's settings, and those the profile set;
// secrets never appear.
func endpointAttrs(e *pipefile.Endpoint, fromProfile []string) string {
	var parts []string
	for _, a := range e.Schema.Attributes {
		switch {
		case e.Set(a.Name):
			parts = append(parts, a.Name+" = "+displayValue(e, a))
		case slices.Contains(fromProfile, a.Name):
			parts = append(parts, a.Name+" = "+displayValue(e, a)+" (profile)")
		}
	}
	return strings.Join(parts, ", ")
}

func displayValue(e *pipefile.Endpoint, a sdk.Attribute) string {
	switch {
	case e.Sensitive[a.Name]:
		return sdk.Redacted
	case a.Key && e.Key != nil:
		return e.Key.Text
	case e.Unknown[a.Name]:
		return "(known at run time)"
	}
	v := e.Values[a.Name]
	switch x := v.(type) {
	case map[string]string:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		return "{ " + strings.Join(keys, ", ") + " }"
	case int64:
		if a.Type == sdk.Size {
			return size(x)
		}
	case time.Duration:
		return x.String()
	}
	return marshal(v)
}

// marshal writes v as JSON, without HTML escapes ("&&" stays "&&").
func marshal(v any) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Sprint(v)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// jsonValue is an attribute's value for plan --json: lists, maps, numbers
// and bools as themselves, sizes in bytes; what printing hides stays a
// string that says why.
func jsonValue(e *pipefile.Endpoint, a sdk.Attribute) any {
	switch {
	case e.Sensitive[a.Name]:
		return sdk.Redacted
	case a.Key && e.Key != nil:
		return e.Key.Text
	case e.Unknown[a.Name]:
		return "(known at run time)"
	}
	if d, ok := e.Values[a.Name].(time.Duration); ok {
		return d.String()
	}
	return e.Values[a.Name]
}

// JSON is the plan for programs.
type JSON struct {
	Host      HostJSON       `json:"host"`
	Pipelines []PipelineJSON `json:"pipelines"`
	Archives  []ArchiveJSON  `json:"archives,omitempty"`
	Notifies  []NotifyJSON   `json:"notify,omitempty"`
	Drills    []DrillJSON    `json:"drills,omitempty"`
}

type HostJSON struct {
	CPUs   int   `json:"cpus"`
	Memory int64 `json:"memory_bytes"`
}

type PipelineJSON struct {
	Name        string           `json:"name"`
	Profile     string           `json:"profile"`
	ProfileFrom string           `json:"profile_from"`
	ProfileRule string           `json:"profile_rule,omitempty"`
	ChunkSize   int              `json:"chunk_size"`
	Streams     int              `json:"streams"`
	Buffers     int              `json:"buffers"`
	RateLimit   int64            `json:"rate_limit_bytes_per_sec,omitempty"`
	Source      EndpointJSON     `json:"source"`
	Stages      []StageJSON      `json:"stages"`
	Sinks       []EndpointJSON   `json:"sinks"`
	Positions   []PositionJSON   `json:"positions"`
	Memory      map[string]int64 `json:"memory_bytes"`
	Hooks       []HookJSON       `json:"hooks,omitempty"`
	// Sign is the fingerprint of the key the runs are signed with; Trust
	// those of the keys whose signatures the runs read must bear.
	Sign  string   `json:"sign,omitempty"`
	Trust []string `json:"trust,omitempty"`
}

type EndpointJSON struct {
	Type      string         `json:"type"`
	Config    map[string]any `json:"config"`
	RateLimit int64          `json:"rate_limit_bytes_per_sec,omitempty"`
}

type StageJSON struct {
	Type         string   `json:"type"`
	Codec        string   `json:"codec,omitempty"`
	Level        int      `json:"level,omitempty"`
	Workers      int      `json:"workers,omitempty"`
	ChunkSize    int      `json:"chunk_size,omitempty"`
	Fingerprints []string `json:"fingerprints,omitempty"`
}

type PositionJSON struct {
	Name       string `json:"name"`
	Buffers    int    `json:"buffers"`
	BufferSize int    `json:"buffer_size"`
}

// JSON returns the plan for --json.
func (pl *Plan) JSON() JSON {
	out := JSON{Host: HostJSON{CPUs: pl.Host.CPUs, Memory: pl.Host.Memory}}
	for _, p := range pl.Pipelines {
		pj := PipelineJSON{Name: p.Name, Profile: p.Profile.Name, ProfileFrom: p.ProfileFrom, ProfileRule: p.Profile.Rule, ChunkSize: p.ChunkSize,
			Streams: p.Streams, Buffers: p.Layout.Buffers, RateLimit: p.Def.RateLimit, Source: endpointJSON(p.Source),
			Memory: map[string]int64{"budget": p.Budget(), "chunks": p.Layout.Chunks, "state": p.Layout.State, "endpoints": p.EndpointMemory, "dedup_restore": p.DedupRestoreMemory, "runtime": RuntimeMemory,
				"plugins": int64(len(p.Processes())) * PluginMemory}}
		for _, s := range p.Stages {
			sj := StageJSON{Type: s.Type, Codec: s.Codec, Level: s.Level, Fingerprints: s.Keys.Fingerprints}
			if s.Kind().ChunkParallel {
				sj.Workers, sj.ChunkSize = s.Workers, s.ChunkSize
			}
			pj.Stages = append(pj.Stages, sj)
		}
		for _, k := range p.Sinks {
			pj.Sinks = append(pj.Sinks, endpointJSON(k))
		}
		for _, pos := range p.Layout.Positions {
			pj.Positions = append(pj.Positions, PositionJSON{pos.Name, pos.Buffers, pos.BufferSize})
		}
		pj.Hooks = hooksJSON(p.Def)
		pj.Sign, pj.Trust = fingerprint(p.Sign), p.Trust.Fingerprints()
		out.Pipelines = append(out.Pipelines, pj)
	}
	for _, a := range pl.Archives {
		out.Archives = append(out.Archives, a.json())
	}
	if pl.File != nil {
		for _, n := range pl.File.Notifies {
			out.Notifies = append(out.Notifies, notifyJSON(n))
		}
		for _, d := range pl.File.Drills {
			out.Drills = append(out.Drills, drillJSON(d))
		}
	}
	return out
}

func endpointJSON(e *pipefile.Endpoint) EndpointJSON {
	ej := EndpointJSON{Type: e.Type, Config: map[string]any{}, RateLimit: e.RateLimit}
	for _, a := range e.Schema.Attributes {
		if e.Set(a.Name) {
			ej.Config[a.Name] = jsonValue(e, a)
		}
	}
	return ej
}

// Plural is n and word, in the plural unless n is 1 ("2 identities",
// "3 plugin processes").
func Plural(n int, word string) string {
	switch {
	case n == 1:
		return fmt.Sprintf("%d %s", n, word)
	case strings.HasSuffix(word, "y"):
		return fmt.Sprintf("%d %sies", n, word[:len(word)-1])
	case strings.HasSuffix(word, "s"):
		return fmt.Sprintf("%d %ses", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// lockLine says how a storage sink locks what it writes (its
// object_lock_days and object_lock_mode), "" when it does not.
func lockLine(b *pipefile.Block) string {
	days, ok := b.Int("object_lock_days")
	if !ok || days <= 0 {
		return ""
	}
	mode := b.String("object_lock_mode")
	if mode == "" {
		mode = "compliance"
	}
	unit := "days"
	if days == 1 {
		unit = "day"
	}
	return fmt.Sprintf("every object but the store's index locked (%s) for %d %s from its upload, in the request that writes it; nothing still locked is deleted", strings.ToLower(mode), days, unit)
}
