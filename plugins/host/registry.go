// Package host is the side of the plugin system that pipe itself runs: the
// registry of endpoint types a pipeline may name, the plugin processes
// behind them (pipe's own built-ins, served by pipe starting itself, and
// third-party pipe-plugin-NAME executables found on the plugin path), and
// the adapters that make a remote endpoint look like any sdk.Source or
// sdk.Sink. It knows endpoints only through the SDK's interfaces.
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/pipebackup/pipe/plugins/internal/pb"
	"github.com/pipebackup/pipe/plugins/internal/wire"
	"github.com/pipebackup/pipe/plugins/sdk"
)

// Prefix is the start of a third-party plugin's executable name.
const Prefix = "pipe-plugin-"

// Options configure a Registry.
type Options struct {
	// Builtin is the set of endpoints compiled into pipe.
	Builtin sdk.Plugin
	// BuiltinCmd returns the command that serves Builtin as a plugin
	// process (pipe itself); nil runs the built-ins in this process. Its
	// Env holds only the variables it adds: every plugin process gets
	// pipe's environment less pipe's own variables (PIPE_*) and those the
	// pipeline file read (HideEnv).
	BuiltinCmd func() *exec.Cmd
	// Dirs are searched in order for pipe-plugin-NAME executables.
	Dirs []string
	// Log receives the plugins' log records (sdk.Log), each with the
	// plugin's name; nil drops them.
	Log *slog.Logger
}

// Registry holds the endpoint types a pipeline file may name.
type Registry struct {
	o       Options
	builtin *process // nil: built-ins run in this process

	mu      sync.Mutex
	sources map[string]sdk.SourceType
	sinks   map[string]sdk.SinkType
	plugins map[string]*external // by plugin name, once looked for
	pins    map[string]Pin
	hidden  *hiddenEnv
}

// Pin fixes a third-party plugin's executable and its SHA-256.
type Pin struct {
	Path   string
	SHA256 string
}

// external is a third-party plugin, found or not.
type external struct {
	once sync.Once // fills the rest
	name string
	path string // "" when not found
	proc *process
	info *pb.GetSchema_Response
	err  error
}

// New returns a registry.
func New(o Options) (*Registry, error) {
	r := &Registry{o: o, sources: map[string]sdk.SourceType{}, sinks: map[string]sdk.SinkType{},
		plugins: map[string]*external{}, pins: map[string]Pin{}, hidden: &hiddenEnv{names: map[string]bool{}}}
	if o.BuiltinCmd == nil && o.Log != nil {
		sdk.SetLog(o.Log.With("plugin", o.Builtin.Name)) // in-process endpoints log straight to pipe
	}
	if o.BuiltinCmd != nil {
		self, _ := os.Executable()
		r.builtin = newProcess(o.Builtin.Name, self, o.BuiltinCmd, o.Log)
		r.builtin.hidden = r.hidden
		r.builtin.fill, r.builtin.send = true, true // built with this SDK
	}
	p := o.Builtin
	for name, t := range p.Sources {
		if err := t.Schema().Validate(); err != nil {
			return nil, fmt.Errorf("built-in source %q: %w", name, err)
		}
		if r.builtin != nil {
			t = &remoteSourceType{remoteType{proc: r.builtin, kind: pb.Kind_KIND_SOURCE, name: name, schema: t.Schema()}}
		}
		r.sources[name] = t
	}
	for name, t := range p.Sinks {
		if err := t.Schema().Validate(); err != nil {
			return nil, fmt.Errorf("built-in sink %q: %w", name, err)
		}
		if r.builtin != nil {
			t = &remoteSinkType{remoteType{proc: r.builtin, kind: pb.Kind_KIND_SINK, name: name, schema: t.Schema()}}
		}
		r.sinks[name] = t
	}
	return r, nil
}

// NewRegistry returns a registry of in-process endpoint sets, for tests and
// tools that need no plugin processes. Two sets may not provide the same
// type.
func NewRegistry(plugins ...sdk.Plugin) (*Registry, error) {
	merged := sdk.Plugin{Name: "builtin", Sources: map[string]sdk.SourceType{}, Sinks: map[string]sdk.SinkType{}}
	owner := map[string]string{}
	for _, p := range plugins {
		for n, t := range p.Sources {
			if prev, ok := owner["source/"+n]; ok {
				return nil, fmt.Errorf("plugins %s and %s both provide source %q", prev, p.Name, n)
			}
			owner["source/"+n] = p.Name
			if err := t.Schema().Validate(); err != nil {
				return nil, fmt.Errorf("plugin %s: source %q: %w", p.Name, n, err)
			}
			merged.Sources[n] = t
		}
		for n, t := range p.Sinks {
			if prev, ok := owner["sink/"+n]; ok {
				return nil, fmt.Errorf("plugins %s and %s both provide sink %q", prev, p.Name, n)
			}
			owner["sink/"+n] = p.Name
			if err := t.Schema().Validate(); err != nil {
				return nil, fmt.Errorf("plugin %s: sink %q: %w", p.Name, n, err)
			}
			merged.Sinks[n] = t
		}
	}
	return New(Options{Builtin: merged})
}

// HideEnv keeps the environment variable name from every plugin process
// started from now on (and so from the commands they start): pipe read it
// for the pipeline file, and endpoints get its value only through their
// attributes.
func (r *Registry) HideEnv(name string) { r.hidden.add(name) }

// Pin makes the plugin called name come from path (if set) and start only
// if its executable has the given SHA-256 (if set).
func (r *Registry) Pin(name, path, sha256 string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, builtin := r.o.Builtin.Sources[name]; builtin {
		return fmt.Errorf("%q is a built-in endpoint of pipe, not a plugin", name)
	}
	if _, builtin := r.o.Builtin.Sinks[name]; builtin {
		return fmt.Errorf("%q is a built-in endpoint of pipe, not a plugin", name)
	}
	if sha256 != "" && len(sha256) != 64 {
		return fmt.Errorf("sha256 %q: write the 64 hex digits that `sha256sum %s%s` prints", sha256, Prefix, name)
	}
	if _, done := r.plugins[name]; done {
		return fmt.Errorf("plugin %q was already started; pin it before any pipeline uses it", name)
	}
	r.pins[name] = Pin{Path: path, SHA256: strings.ToLower(sha256)}
	return nil
}

// Schema returns the schema of an endpoint type. found is false when no
// built-in and no plugin provides it; err says why a plugin that should
// provide it failed.
func (r *Registry) Schema(kind, typ string) (schema sdk.Schema, found bool, err error) {
	switch kind {
	case "source":
		t, err := r.Source(typ)
		if t == nil {
			return sdk.Schema{}, false, err
		}
		return t.Schema(), true, nil
	case "sink":
		t, err := r.Sink(typ)
		if t == nil {
			return sdk.Schema{}, false, err
		}
		return t.Schema(), true, nil
	}
	return sdk.Schema{}, false, fmt.Errorf("unknown endpoint kind %q", kind)
}

// Source returns the source type called typ; nil and no error when none
// provides it.
func (r *Registry) Source(typ string) (sdk.SourceType, error) {
	r.mu.Lock()
	t, ok := r.sources[typ]
	r.mu.Unlock()
	if ok {
		return t, nil
	}
	if err := r.lookup(typ); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sources[typ], nil
}

// Sink returns the sink type called typ; nil and no error when none
// provides it.
func (r *Registry) Sink(typ string) (sdk.SinkType, error) {
	r.mu.Lock()
	t, ok := r.sinks[typ]
	r.mu.Unlock()
	if ok {
		return t, nil
	}
	if err := r.lookup(typ); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sinks[typ], nil
}

// Process names the plugin process that serves the endpoint type, "" when
// it runs in this process (or is unknown).
func (r *Registry) Process(kind, typ string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var t any
	if kind == "sink" {
		t = r.sinks[typ]
	} else {
		t = r.sources[typ]
	}
	switch rt := t.(type) {
	case *remoteSourceType:
		return rt.proc.name
	case *remoteSinkType:
		return rt.proc.name
	}
	return ""
}

// Memory returns what an endpoint of the type buffers on its own with cfg
// and streams objects in flight (sdk.MemoryEstimator), 0 if nothing. Built-in
// types are asked in this process, so planning starts no plugin process.
func (r *Registry) Memory(kind, typ string, cfg sdk.Config, streams int) int64 {
	var t any
	if kind == "sink" {
		if bt, ok := r.o.Builtin.Sinks[typ]; ok {
			t = bt
		} else {
			t, _ = r.Sink(typ)
		}
	} else {
		if bt, ok := r.o.Builtin.Sources[typ]; ok {
			t = bt
		} else {
			t, _ = r.Source(typ)
		}
	}
	if m, ok := t.(sdk.MemoryEstimator); ok { // remote types too: they ask their plugin
		return m.Memory(cfg, streams)
	}
	return 0
}

// SmallObjectMemory is Memory for objects of at most maxObject bytes (a WAL
// archive's): a built-in type that knows its buffers shrink with its
// objects says so (sdk.SmallObjectMemoryEstimator); any other is counted
// by Memory.
func (r *Registry) SmallObjectMemory(kind, typ string, cfg sdk.Config, streams int, maxObject int64) int64 {
	var t any
	if kind == "sink" {
		t = r.o.Builtin.Sinks[typ]
	} else {
		t = r.o.Builtin.Sources[typ]
	}
	if m, ok := t.(sdk.SmallObjectMemoryEstimator); ok {
		return m.SmallObjectMemory(cfg, streams, maxObject)
	}
	return r.Memory(kind, typ, cfg, streams)
}

// candidates are the plugin names that may provide typ: the type itself,
// and its prefix before "_" (plugin "acme" provides "acme_db").
func candidates(typ string) []string {
	c := []string{typ}
	if i := strings.IndexByte(typ, '_'); i > 0 {
		c = append(c, typ[:i])
	}
	return c
}

// lookup starts the plugins that may provide typ and registers their types.
func (r *Registry) lookup(typ string) error {
	var errs []error
	for _, name := range candidates(typ) {
		ext := r.external(name)
		if ext.path == "" {
			continue
		}
		if ext.err != nil {
			errs = append(errs, ext.err)
		}
	}
	return errors.Join(errs...)
}

// external finds and starts the plugin called name, once; concurrent
// callers wait for the first.
func (r *Registry) external(name string) *external {
	r.mu.Lock()
	ext, ok := r.plugins[name]
	if !ok {
		ext = &external{name: name}
		r.plugins[name] = ext
	}
	pin := r.pins[name]
	r.mu.Unlock()
	ext.once.Do(func() { r.start(ext, pin) })
	return ext
}

func (r *Registry) start(ext *external, pin Pin) {
	name := ext.name
	ext.path = pin.Path
	if ext.path == "" {
		ext.path = r.find(name)
	}
	if ext.path == "" {
		if pin.SHA256 != "" {
			ext.err = fmt.Errorf("plugin %s is pinned but %s%s is on no plugin path (%s)", name, Prefix, name, strings.Join(r.o.Dirs, ":"))
			ext.path = "(missing)"
		}
		return
	}
	path := ext.path
	ext.proc = newProcess(name, path, func() *exec.Cmd { return exec.Command(path) }, r.o.Log)
	ext.proc.hidden = r.hidden
	ext.proc.sha256 = pin.SHA256
	ext.info, ext.err = ext.proc.schema()
	if ext.err != nil {
		return
	}
	ext.proc.fill, ext.proc.send = ext.info.GetFillFile(), ext.info.GetSendFile()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ep := range ext.info.GetEndpoints() {
		rt := remoteType{proc: ext.proc, kind: ep.GetKind(), name: ep.GetType(), schema: wire.SchemaFromPB(ep.GetSchema())}
		if ep.GetKind() == pb.Kind_KIND_SINK {
			if _, taken := r.sinks[rt.name]; !taken {
				r.sinks[rt.name] = &remoteSinkType{rt}
			}
		} else if _, taken := r.sources[rt.name]; !taken {
			r.sources[rt.name] = &remoteSourceType{rt}
		}
	}
}

// schema starts the process and asks for its endpoint types.
func (p *process) schema() (*pb.GetSchema_Response, error) {
	rpc, err := p.conn()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	info, err := rpc.GetSchema(ctx, &pb.GetSchema_Request{})
	if err != nil {
		return nil, p.wrap(ctx, err)
	}
	for _, ep := range info.GetEndpoints() {
		if err := wire.SchemaFromPB(ep.GetSchema()).Validate(); err != nil {
			return nil, fmt.Errorf("plugin %s: %s %q declares an invalid schema: %w", p.name, strings.ToLower(strings.TrimPrefix(ep.GetKind().String(), "KIND_")), ep.GetType(), err)
		}
	}
	return info, nil
}

// find returns the first pipe-plugin-NAME executable on the plugin path.
func (r *Registry) find(name string) string {
	for _, dir := range r.o.Dirs {
		p := filepath.Join(dir, Prefix+name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// discovered lists the plugin names on the plugin path.
func (r *Registry) discovered() []string {
	seen := map[string]bool{}
	var names []string
	for _, dir := range r.o.Dirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			name, ok := strings.CutPrefix(e.Name(), Prefix)
			if !ok || name == "" || seen[name] {
				continue
			}
			if r.find(name) != "" {
				seen[name] = true
				names = append(names, name)
			}
		}
	}
	sort.Strings(names)
	return names
}

// Types lists the types of a kind known without starting a plugin, and the
// names of the plugins on the plugin path: for suggestions and messages.
func (r *Registry) Types(kind string) []string {
	r.mu.Lock()
	var names []string
	if kind == "sink" {
		for n := range r.sinks {
			names = append(names, n)
		}
	} else {
		for n := range r.sources {
			names = append(names, n)
		}
	}
	r.mu.Unlock()
	names = append(names, r.discovered()...)
	sort.Strings(names)
	return dedupe(names)
}

func dedupe(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// PluginInfo describes a plugin for `pipe plugins`.
type PluginInfo struct {
	Name    string   `json:"name"`
	Version string   `json:"version"`
	Path    string   `json:"path"`
	SHA256  string   `json:"sha256,omitempty"`
	Sources []string `json:"sources"`
	Sinks   []string `json:"sinks"`
	Error   string   `json:"error,omitempty"`
}

// Plugins describes the built-ins and every plugin on the plugin path,
// starting each to ask what it provides.
func (r *Registry) Plugins() []PluginInfo {
	self, _ := os.Executable()
	b := PluginInfo{Name: r.o.Builtin.Name, Version: r.o.Builtin.Version, Path: self + " (built in)"}
	for n := range r.o.Builtin.Sources {
		b.Sources = append(b.Sources, n)
	}
	for n := range r.o.Builtin.Sinks {
		b.Sinks = append(b.Sinks, n)
	}
	sort.Strings(b.Sources)
	sort.Strings(b.Sinks)
	out := []PluginInfo{b}
	names := r.discovered()
	// Start them all at once: one slow plugin does not hold up the rest.
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Add(1)
		go func() { defer wg.Done(); r.external(name) }()
	}
	wg.Wait()
	for _, name := range names {
		ext := r.external(name)
		pi := PluginInfo{Name: name, Path: ext.path, SHA256: fileSHA256(ext.path)}
		if ext.err != nil {
			pi.Error = ext.err.Error()
		} else {
			pi.Name, pi.Version = ext.info.GetName(), ext.info.GetVersion()
			for _, ep := range ext.info.GetEndpoints() {
				if ep.GetKind() == pb.Kind_KIND_SINK {
					pi.Sinks = append(pi.Sinks, ep.GetType())
				} else {
					pi.Sources = append(pi.Sources, ep.GetType())
				}
			}
		}
		out = append(out, pi)
	}
	return out
}

// Close stops every plugin process this registry started.
func (r *Registry) Close() {
	if r.builtin != nil {
		r.builtin.stop()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ext := range r.plugins {
		if ext.proc != nil {
			ext.proc.stop()
		}
	}
}
